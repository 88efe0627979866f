//! The `capstan` command.

fn main() {}
