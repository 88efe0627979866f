import { fn } from "./fake.js";

export const record = fn("events.record");
