//! Label and field selectors, parsed and matched like the API server does.

use serde_json::Value;

use super::meta::{is_label_value, is_qualified_name};

/// A parsed label selector: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    /// `key`
    Exists(String),
    /// `!key`
    NotExists(String),
    /// `key=value`, `key==value`, `key in (a,b)`
    In(String, Vec<String>),
    /// `key!=value`, `key notin (a,b)`; also true when the label is absent.
    NotIn(String, Vec<String>),
    /// `key>n`: the label is an integer greater than `n`.
    Gt(String, i64),
    /// `key<n`: the label is an integer less than `n`.
    Lt(String, i64),
}

/// A token of the label selector grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Not,
    NotEquals,
    Equals,
    DoubleEquals,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
}

impl Token {
    /// The token as a value: words, and the keywords `in` / `notin`, which
    /// are valid label values too.
    fn into_word(self) -> Option<String> {
        match self {
            Self::Word(w) => Some(w),
            Self::In => Some("in".to_owned()),
            Self::NotIn => Some("notin".to_owned()),
            _ => None,
        }
    }
}

/// Splits a label selector into tokens.
fn lex(input: &str) -> Vec<Token> {
    let chars: Vec<char> = input.chars().collect();
    let special = |c: char| c.is_whitespace() || "()!,=<>".contains(c);
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let next = chars.get(i + 1).copied();
        let (token, len) = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            '>' => (Token::Gt, 1),
            '<' => (Token::Lt, 1),
            '!' if next == Some('=') => (Token::NotEquals, 2),
            '!' => (Token::Not, 1),
            '=' if next == Some('=') => (Token::DoubleEquals, 2),
            '=' => (Token::Equals, 1),
            _ => {
                let word: String = chars[i..].iter().take_while(|&&c| !special(c)).collect();
                let len = word.chars().count();
                let token = match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Word(word),
                };
                (token, len)
            }
        };
        tokens.push(token);
        i += len;
    }
    tokens
}

impl LabelSelector {
    /// Parses a selector such as `app=web,tier in (a,b),!legacy`. The error
    /// says what is wrong.
    pub(crate) fn parse(input: &str) -> Result<Self, String> {
        let mut tokens = lex(input).into_iter().peekable();
        let mut requirements = Vec::new();
        if tokens.peek().is_none() {
            return Ok(Self(requirements));
        }
        loop {
            let requirement = match tokens.next() {
                Some(Token::Not) => match tokens.next().and_then(Token::into_word) {
                    Some(key) => Requirement::NotExists(checked_key(key)?),
                    None => return Err("expected a label key after '!'".to_owned()),
                },
                Some(token) => {
                    let key = checked_key(token.into_word().ok_or("expected a label key")?)?;
                    match tokens.peek() {
                        None | Some(Token::Comma) => Requirement::Exists(key),
                        Some(_) => match tokens.next() {
                            Some(Token::Equals | Token::DoubleEquals) => {
                                Requirement::In(key, vec![value(&mut tokens)?])
                            }
                            Some(Token::NotEquals) => Requirement::NotIn(key, vec![value(&mut tokens)?]),
                            Some(Token::Gt) => Requirement::Gt(key, integer(&mut tokens)?),
                            Some(Token::Lt) => Requirement::Lt(key, integer(&mut tokens)?),
                            Some(Token::In) => Requirement::In(key, set(&mut tokens)?),
                            Some(Token::NotIn) => Requirement::NotIn(key, set(&mut tokens)?),
                            _ => return Err(format!("expected an operator after label key {key:?}")),
                        },
                    }
                }
                None => return Err("expected a requirement after ','".to_owned()),
            };
            requirements.push(requirement);
            match tokens.next() {
                None => return Ok(Self(requirements)),
                Some(Token::Comma) => {}
                Some(token) => return Err(format!("expected ',' or the end, found {token:?}")),
            }
        }
    }

    /// True if the labels (`metadata.labels`, possibly absent) match.
    pub(crate) fn matches(&self, labels: Option<&Value>) -> bool {
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|requirement| match requirement {
            Requirement::Exists(key) => label(key).is_some(),
            Requirement::NotExists(key) => label(key).is_none(),
            Requirement::In(key, values) => label(key).is_some_and(|v| values.iter().any(|x| x == v)),
            Requirement::NotIn(key, values) => label(key).is_none_or(|v| values.iter().all(|x| x != v)),
            Requirement::Gt(key, n) => label(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v > *n),
            Requirement::Lt(key, n) => label(key).and_then(|v| v.parse::<i64>().ok()).is_some_and(|v| v < *n),
        })
    }
}

/// Checks that a label key is a qualified name.
fn checked_key(key: String) -> Result<String, String> {
    if is_qualified_name(&key) { Ok(key) } else { Err(format!("invalid label key {key:?}")) }
}

/// Reads the value after `=`, `==` or `!=`; absent means the empty value.
fn value(tokens: &mut std::iter::Peekable<impl Iterator<Item = Token>>) -> Result<String, String> {
    let value = match tokens.peek() {
        None | Some(Token::Comma) => String::new(),
        Some(_) => tokens.next().and_then(Token::into_word).ok_or("expected a label value")?,
    };
    if is_label_value(&value) { Ok(value) } else { Err(format!("invalid label value {value:?}")) }
}

/// Reads the integer after `>` or `<`.
fn integer(tokens: &mut impl Iterator<Item = Token>) -> Result<i64, String> {
    let word = tokens.next().and_then(Token::into_word).ok_or("expected an integer")?;
    word.parse().map_err(|_| format!("invalid integer value {word:?}"))
}

/// Reads `(a, b, ...)` after `in` or `notin`; the set may not be empty.
fn set(tokens: &mut impl Iterator<Item = Token>) -> Result<Vec<String>, String> {
    if tokens.next() != Some(Token::Open) {
        return Err("expected '(' after 'in' or 'notin'".to_owned());
    }
    let mut values = Vec::new();
    loop {
        match tokens.next() {
            Some(Token::Close) if values.is_empty() => return Err("the set of values may not be empty".to_owned()),
            Some(token) => {
                let value = token.into_word().ok_or("expected a label value in the set")?;
                if !is_label_value(&value) {
                    return Err(format!("invalid label value {value:?}"));
                }
                values.push(value);
            }
            None => return Err("unterminated set of values".to_owned()),
        }
        match tokens.next() {
            Some(Token::Comma) => {}
            Some(Token::Close) => return Ok(values),
            _ => return Err("expected ',' or ')' in the set of values".to_owned()),
        }
    }
}

/// A parsed field selector: every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct FieldSelector(Vec<FieldTerm>);

/// `path=value`, `path==value` or `path!=value`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    path: Vec<String>,
    equal: bool,
    value: String,
}

impl FieldSelector {
    /// Parses a selector such as `metadata.name=web,status.phase!=Failed`.
    pub(super) fn parse(input: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        if input.trim().is_empty() {
            return Ok(Self(terms));
        }
        for term in input.split(',') {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, true, v)
            } else {
                return Err(format!("invalid field selector term {term:?}: expected '=', '==' or '!='"));
            };
            let path: Vec<String> = path.trim().split('.').map(str::to_owned).collect();
            if path.iter().any(String::is_empty) {
                return Err(format!("invalid field path in field selector term {term:?}"));
            }
            terms.push(FieldTerm { path, equal, value: value.trim().to_owned() });
        }
        Ok(Self(terms))
    }

    /// True if the object matches. A missing field reads as the empty string.
    pub(super) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|term| {
            let field = term.path.iter().try_fold(object, |v, key| v.get(key));
            let text = match field {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (text == term.value) == term.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn matches(selector: &str, labels: Value) -> bool {
        LabelSelector::parse(selector).expect("valid selector").matches(Some(&labels))
    }

    #[test]
    fn equality_and_inequality_requirements_match_labels() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(matches("app=web", labels.clone()));
        assert!(matches("app==web,tier=front", labels.clone()));
        assert!(!matches("app=db", labels.clone()));
        assert!(matches("app!=db", labels.clone()));
        assert!(matches("missing!=x", labels.clone()));
        assert!(matches(" app = web , tier != back ", labels));
    }

    #[test]
    fn existence_and_set_requirements_match_labels() {
        let labels = json!({"app": "web", "version": "3"});
        assert!(matches("app", labels.clone()));
        assert!(matches("!legacy", labels.clone()));
        assert!(!matches("!app", labels.clone()));
        assert!(matches("app in (db, web)", labels.clone()));
        assert!(!matches("app notin (web)", labels.clone()));
        assert!(matches("tier notin (front)", labels.clone()));
        assert!(matches("version>2,version<4", labels.clone()));
        assert!(!matches("app>2", labels));
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(matches("", json!({})));
        assert!(LabelSelector::parse("  ").expect("valid").matches(None));
    }

    #[test]
    fn malformed_label_selectors_are_rejected() {
        for bad in ["=web", "app=web,", "app in ()", "app in (a", "app in a", "bad key=x", "app=a b", "a>x", "!"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(LabelSelector::parse("app=").is_ok(), "an empty value is valid");
    }

    #[test]
    fn field_selectors_compare_dotted_paths_as_strings() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"replicas": 3}, "status": {"phase": "Running"}});
        let check = |s: &str| FieldSelector::parse(s).expect("valid selector").matches(&pod);
        assert!(check("metadata.name=p"));
        assert!(check("metadata.name==p,metadata.namespace=ns"));
        assert!(check("status.phase!=Failed"));
        assert!(check("spec.replicas=3"));
        assert!(check("spec.missing="));
        assert!(!check("metadata.name!=p"));
    }

    #[test]
    fn malformed_field_selectors_are_rejected() {
        for bad in ["metadata.name", "=x", "metadata..name=x", "a=b,"] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad:?} should be rejected");
        }
    }
}
