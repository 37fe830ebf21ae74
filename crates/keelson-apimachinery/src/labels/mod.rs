//! Kubernetes label selectors: parsing (query-string and API-object forms),
//! matching, and canonical rendering.
//!
//! A [`LabelSelector`] is a conjunction of [`Requirement`]s; the empty
//! selector matches every object. Semantics follow the Kubernetes API server:
//!
//! - `k=v` / `k==v`: label present and equal to `v`;
//! - `k!=v`: label absent, or present with another value;
//! - `k in (a,b)`: label present with one of the values;
//! - `k notin (a,b)`: label absent, or present with none of the values;
//! - `k` / `!k`: label present / absent, whatever its value;
//! - `k>3` / `k<3`: label present, parses as an `i64`, and is greater / less.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde_json::Value;

/// Maximum length of a label value and of the name part of a key.
const MAX_NAME_LEN: usize = 63;
/// Maximum length of the DNS-subdomain prefix of a key.
const MAX_PREFIX_LEN: usize = 253;

/// Why a label selector was rejected. The `Display` text is meant to be sent
/// verbatim to API clients (HTTP 400 message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelSelectorError {
    /// Syntax error: `found` (quoted, or `end of string`) at byte offset
    /// `position` where `expected` was required.
    #[error(
        "unable to parse requirement: found {found} at position {position}, expected: {expected}"
    )]
    Unexpected {
        found: String,
        position: usize,
        expected: &'static str,
    },
    /// The value set of `key`, opened with `(`, is never closed.
    #[error("unable to parse requirement: unterminated value set for key \"{key}\": missing ')'")]
    UnterminatedSet { key: String },
    /// `in` / `notin` on `key` with no values at all (`a in ()`).
    #[error("unable to parse requirement: operator '{operator}' on key \"{key}\" needs a non-empty set of values")]
    EmptySet { key: String, operator: Operator },
    /// `operator` on `key` is not followed by its value or set (`a>`, `a in`).
    #[error("unable to parse requirement: missing value after '{operator}' for key \"{key}\"")]
    MissingValue { key: String, operator: Operator },
    /// `key` is not a valid label key; `reason` names the broken rule.
    #[error("unable to parse requirement: invalid label key \"{key}\": {reason}")]
    InvalidKey { key: String, reason: String },
    /// `value` is not acceptable for `key`: not a valid label value, or not
    /// an integer for `>` / `<`; `reason` names the broken rule.
    #[error("unable to parse requirement: invalid value \"{value}\" for key \"{key}\": {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    /// `operator` on `key` takes `expected` values but got `got`
    /// (API-object form or [`Requirement::new`]).
    #[error("unable to parse requirement: operator '{operator}' on key \"{key}\" takes {expected}, got {got}")]
    WrongValueCount {
        key: String,
        operator: Operator,
        expected: &'static str,
        got: usize,
    },
    /// The API-object form is malformed: wrong JSON type, missing member or
    /// unknown operator. The message names the offending member.
    #[error("invalid label selector: {0}")]
    InvalidSelectorObject(String),
}

/// The operator of a label [`Requirement`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    /// `k=v` (also written `k==v`).
    Equals,
    /// `k!=v`.
    NotEquals,
    /// `k in (a,b)`.
    In,
    /// `k notin (a,b)`.
    NotIn,
    /// `k`: the label is present.
    Exists,
    /// `!k`: the label is absent.
    DoesNotExist,
    /// `k>N`: integer greater-than.
    Gt,
    /// `k<N`: integer less-than.
    Lt,
}

impl Operator {
    /// Spelling used in messages: `=`, `!=`, `in`, `notin`, `exists`, `!`, `>`, `<`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::Gt => ">",
            Operator::Lt => "<",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One validated term of a label selector.
///
/// Invariants (enforced by [`Requirement::new`]): the key is a valid label
/// key; `Equals`/`NotEquals` hold exactly one valid label value; `In`/`NotIn`
/// hold at least one valid value, sorted and de-duplicated; `Exists`/
/// `DoesNotExist` hold none; `Gt`/`Lt` hold exactly one `i64`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Builds a requirement, validating the key, the values, and their number
    /// against the operator (see the type-level invariants).
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        mut values: Vec<String>,
    ) -> Result<Requirement, LabelSelectorError> {
        let key = key.into();
        if let Err(reason) = validate_key(&key) {
            return Err(LabelSelectorError::InvalidKey { key, reason });
        }
        let expected = match op {
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => "no values",
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(LabelSelectorError::EmptySet { key, operator: op })
            }
            Operator::Equals | Operator::NotEquals | Operator::Gt | Operator::Lt
                if values.len() != 1 =>
            {
                "exactly one value"
            }
            _ => "",
        };
        if !expected.is_empty() {
            let got = values.len();
            return Err(LabelSelectorError::WrongValueCount {
                key,
                operator: op,
                expected,
                got,
            });
        }
        values.sort();
        values.dedup();
        for value in &values {
            let checked = match op {
                Operator::Gt | Operator::Lt => value
                    .parse::<i64>()
                    .map(drop)
                    .map_err(|_| format!("operator '{op}' needs an integer")),
                _ => validate_value(value),
            };
            if let Err(reason) = checked {
                let value = value.clone();
                return Err(LabelSelectorError::InvalidValue { key, value, reason });
            }
        }
        Ok(Requirement { key, op, values })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values (sorted and de-duplicated).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label with this key and value `label` (`None` = the label is
    /// absent) satisfies the requirement.
    pub fn matches_value(&self, label: Option<&str>) -> bool {
        let Some(v) = label else {
            return matches!(
                self.op,
                Operator::NotEquals | Operator::NotIn | Operator::DoesNotExist
            );
        };
        match self.op {
            Operator::Exists => true,
            Operator::DoesNotExist => false,
            Operator::Equals | Operator::In => self.values.iter().any(|x| x == v),
            Operator::NotEquals | Operator::NotIn => self.values.iter().all(|x| x != v),
            Operator::Gt | Operator::Lt => {
                match (v.parse::<i64>(), self.values[0].parse::<i64>()) {
                    (Ok(have), Ok(bound)) if self.op == Operator::Gt => have > bound,
                    (Ok(have), Ok(bound)) => have < bound,
                    _ => false,
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Canonical query syntax: `k=v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
    /// `k`, `!k`, `k>N`, `k<N`. A set holding only the empty value renders as
    /// `(,)` so that it parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.key;
        match self.op {
            Operator::Exists => write!(f, "{k}"),
            Operator::DoesNotExist => write!(f, "!{k}"),
            Operator::Equals | Operator::NotEquals | Operator::Gt | Operator::Lt => {
                write!(f, "{k}{}{}", self.op, self.values[0])
            }
            Operator::In | Operator::NotIn => {
                let joined = self.values.join(",");
                let set = if joined.is_empty() { "," } else { &joined };
                write!(f, "{k} {} ({set})", self.op)
            }
        }
    }
}

/// A conjunction of label [`Requirement`]s, kept sorted by key (stable:
/// requirements on one key keep their order). Empty = match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The selector that matches every object.
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Builds a selector from validated requirements, sorting them by key.
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> LabelSelector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }

    /// Parses the query-string syntax (`?labelSelector=`, `kubectl -l`):
    /// comma-separated requirements, whitespace allowed around tokens. The
    /// empty (or all-whitespace) string yields the match-everything selector;
    /// a trailing or doubled comma is an error. Keys and values are validated.
    pub fn parse(input: &str) -> Result<LabelSelector, LabelSelectorError> {
        let tokens = lex(input);
        let mut parser = Parser { tokens, next: 0 };
        if parser.peek().0 == Tok::End {
            return Ok(LabelSelector::everything());
        }
        let mut requirements = Vec::new();
        loop {
            requirements.push(parser.requirement()?);
            match parser.bump() {
                (Tok::Comma, _) => {}
                (Tok::End, _) => break,
                (tok, pos) => return Err(unexpected(&tok, pos, "',' or end of string")),
            }
        }
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// Converts the API-object form `{"matchLabels":{k:v},"matchExpressions":
    /// [{"key","operator","values"}]}`. `null`, `{}` and absent (or `null`)
    /// members mean "no constraint", so an empty selector matches everything.
    /// Operators are `In`, `NotIn` (need values), `Exists`, `DoesNotExist`
    /// (must have none). Unknown members are ignored.
    pub fn from_label_selector_json(selector: &Value) -> Result<LabelSelector, LabelSelectorError> {
        if selector.is_null() {
            return Ok(LabelSelector::everything());
        }
        let obj = selector
            .as_object()
            .ok_or_else(|| wrong_type("selector", "an object", selector))?;
        let mut requirements = Vec::new();
        if let Some(labels) = obj.get("matchLabels").filter(|v| !v.is_null()) {
            let labels = labels
                .as_object()
                .ok_or_else(|| wrong_type("matchLabels", "an object", labels))?;
            for (key, value) in labels {
                let value = value
                    .as_str()
                    .ok_or_else(|| wrong_type(&format!("matchLabels[{key}]"), "a string", value))?;
                requirements.push(Requirement::new(
                    key.clone(),
                    Operator::Equals,
                    vec![value.into()],
                )?);
            }
        }
        if let Some(exprs) = obj.get("matchExpressions").filter(|v| !v.is_null()) {
            let exprs = exprs
                .as_array()
                .ok_or_else(|| wrong_type("matchExpressions", "an array", exprs))?;
            for (index, expr) in exprs.iter().enumerate() {
                requirements.push(expression(&format!("matchExpressions[{index}]"), expr)?);
            }
        }
        Ok(LabelSelector::from_requirements(requirements))
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether the label set satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(labels.get(&r.key).map(String::as_str)))
    }

    /// Like [`matches`](Self::matches), reading the object's
    /// `metadata.labels`. Missing or non-object `metadata.labels` means no
    /// labels; non-string label values count as absent.
    pub fn matches_object(&self, obj: &Value) -> bool {
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        self.requirements
            .iter()
            .all(|r| r.matches_value(labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str)))
    }
}

impl fmt::Display for LabelSelector {
    /// Canonical query syntax: requirements joined by `,` (the empty selector
    /// renders as `""`). [`LabelSelector::parse`] of the output yields an
    /// equal selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSelector {
    type Err = LabelSelectorError;

    /// Same as [`LabelSelector::parse`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

fn wrong_type(what: &str, expected: &str, got: &Value) -> LabelSelectorError {
    let kind = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    LabelSelectorError::InvalidSelectorObject(format!("{what}: expected {expected}, got {kind}"))
}

/// Converts one `matchExpressions` entry; `at` names it in messages.
fn expression(at: &str, expr: &Value) -> Result<Requirement, LabelSelectorError> {
    let expr = expr
        .as_object()
        .ok_or_else(|| wrong_type(at, "an object", expr))?;
    let string = |name: &str| match expr.get(name).filter(|v| !v.is_null()) {
        None => Err(LabelSelectorError::InvalidSelectorObject(format!(
            "{at}.{name}: required"
        ))),
        Some(v) => v
            .as_str()
            .ok_or_else(|| wrong_type(&format!("{at}.{name}"), "a string", v)),
    };
    let key = string("key")?;
    let op = match string("operator")? {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        other => {
            return Err(LabelSelectorError::InvalidSelectorObject(format!(
                "{at}.operator: unknown operator \"{other}\" (expected In, NotIn, Exists or DoesNotExist)"
            )))
        }
    };
    let mut values = Vec::new();
    if let Some(items) = expr.get("values").filter(|v| !v.is_null()) {
        let items = items
            .as_array()
            .ok_or_else(|| wrong_type(&format!("{at}.values"), "an array", items))?;
        for (i, item) in items.iter().enumerate() {
            let s = item
                .as_str()
                .ok_or_else(|| wrong_type(&format!("{at}.values[{i}]"), "a string", item))?;
            values.push(s.to_owned());
        }
    }
    Requirement::new(key, op, values)
}

/// Checks a label key `[prefix/]name`: prefix a lowercase DNS subdomain of at
/// most 253 chars, name as [`check_name`]. Returns the broken rule.
fn validate_key(key: &str) -> Result<(), String> {
    let Some((prefix, name)) = key.split_once('/') else {
        return check_name(key).map_err(|e| format!("name part {e}"));
    };
    let dns_label_ok = |l: &str| {
        let b = l.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    if prefix.is_empty() {
        Err("prefix part must be non-empty".into())
    } else if prefix.len() > MAX_PREFIX_LEN {
        Err(format!(
            "prefix part must be no more than {MAX_PREFIX_LEN} characters"
        ))
    } else if !prefix.split('.').all(dns_label_ok) {
        Err("prefix part must be a lowercase RFC 1123 subdomain (lowercase alphanumerics, '-' or '.', starting and ending with an alphanumeric)".into())
    } else if name.contains('/') {
        Err("a key may contain at most one '/'".into())
    } else {
        check_name(name).map_err(|e| format!("name part {e}"))
    }
}

/// Checks a label value: empty, or valid per [`check_name`].
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name(value)
}

/// Checks a non-empty name: at most 63 chars of `[A-Za-z0-9_.-]`, starting
/// and ending with an alphanumeric.
fn check_name(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err("must be non-empty".into());
    }
    if b.len() > MAX_NAME_LEN {
        return Err(format!("must be no more than {MAX_NAME_LEN} characters"));
    }
    let chars_ok = b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
    if chars_ok && b[0].is_ascii_alphanumeric() && b[b.len() - 1].is_ascii_alphanumeric() {
        Ok(())
    } else {
        Err("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into())
    }
}

// ---- Query-string lexer and parser ----------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// Operator or punctuation: `!`, `=`, `==`, `!=`, `>`, `<`, `(`, `)`.
    Sym(&'static str),
    Comma,
    End,
}

/// Splits the input into tokens with their byte offsets; always ends with
/// `End`. Identifiers run until whitespace or one of `!=,()<>`.
fn lex(input: &str) -> Vec<(Tok, usize)> {
    let mut tokens = Vec::new();
    let mut rest = input.char_indices().peekable();
    while let Some((pos, c)) = rest.next() {
        let eq_next = rest.peek().is_some_and(|&(_, n)| n == '=');
        let tok = match c {
            _ if c.is_whitespace() => continue,
            ',' => Tok::Comma,
            '!' | '=' if eq_next => {
                rest.next();
                Tok::Sym(if c == '!' { "!=" } else { "==" })
            }
            '!' => Tok::Sym("!"),
            '=' => Tok::Sym("="),
            '(' => Tok::Sym("("),
            ')' => Tok::Sym(")"),
            '<' => Tok::Sym("<"),
            '>' => Tok::Sym(">"),
            _ => {
                let mut end = pos + c.len_utf8();
                while let Some(&(p, n)) = rest.peek() {
                    if n.is_whitespace() || "!=,()<>".contains(n) {
                        break;
                    }
                    end = p + n.len_utf8();
                    rest.next();
                }
                Tok::Ident(input[pos..end].to_owned())
            }
        };
        tokens.push((tok, pos));
    }
    tokens.push((Tok::End, input.len()));
    tokens
}

fn unexpected(tok: &Tok, position: usize, expected: &'static str) -> LabelSelectorError {
    let found = match tok {
        Tok::Ident(s) => format!("'{s}'"),
        Tok::Sym(s) => format!("'{s}'"),
        Tok::Comma => "','".into(),
        Tok::End => "end of string".into(),
    };
    LabelSelectorError::Unexpected {
        found,
        position,
        expected,
    }
}

struct Parser {
    tokens: Vec<(Tok, usize)>,
    next: usize,
}

impl Parser {
    fn peek(&self) -> &(Tok, usize) {
        &self.tokens[self.next]
    }

    /// Returns the next token and advances (staying on the final `End`).
    fn bump(&mut self) -> (Tok, usize) {
        let t = self.tokens[self.next].clone();
        self.next = (self.next + 1).min(self.tokens.len() - 1);
        t
    }

    fn requirement(&mut self) -> Result<Requirement, LabelSelectorError> {
        let (mut tok, mut pos) = self.bump();
        let negated = tok == Tok::Sym("!");
        if negated {
            (tok, pos) = self.bump();
        }
        let Tok::Ident(key) = tok else {
            return Err(unexpected(&tok, pos, "label key"));
        };
        let (tok, pos) = self.peek().clone();
        let op = match &tok {
            _ if negated => return Requirement::new(key, Operator::DoesNotExist, Vec::new()),
            Tok::Comma | Tok::End => return Requirement::new(key, Operator::Exists, Vec::new()),
            Tok::Sym("=" | "==") => Operator::Equals,
            Tok::Sym("!=") => Operator::NotEquals,
            Tok::Sym(">") => Operator::Gt,
            Tok::Sym("<") => Operator::Lt,
            Tok::Ident(w) if w == "in" => Operator::In,
            Tok::Ident(w) if w == "notin" => Operator::NotIn,
            _ => {
                let expected = "'=', '==', '!=', 'in', 'notin', '>', '<', ',' or end of string";
                return Err(unexpected(&tok, pos, expected));
            }
        };
        self.bump();
        let values = match (op, self.peek().clone()) {
            (Operator::In | Operator::NotIn, _) => self.value_set(&key, op)?,
            (_, (Tok::Ident(v), _)) => {
                self.bump();
                vec![v]
            }
            (Operator::Gt | Operator::Lt, (Tok::Comma | Tok::End, _)) => {
                return Err(LabelSelectorError::MissingValue { key, operator: op })
            }
            // `k=` and `k!=` compare against the empty value.
            (_, (Tok::Comma | Tok::End, _)) => vec![String::new()],
            (_, (tok, pos)) => {
                return Err(unexpected(&tok, pos, "label value, ',' or end of string"))
            }
        };
        Requirement::new(key, op, values)
    }

    /// Parses `( v1 , v2 , ... )`. Explicit commas delimit empty values, so
    /// `(,)` is the set holding only `""`, while `()` is an error.
    fn value_set(&mut self, key: &str, op: Operator) -> Result<Vec<String>, LabelSelectorError> {
        let (key, operator) = (key.to_owned(), op);
        match self.bump() {
            (Tok::Sym("("), _) => {}
            (Tok::Comma | Tok::End, _) => {
                return Err(LabelSelectorError::MissingValue { key, operator })
            }
            (tok, pos) => return Err(unexpected(&tok, pos, "'('")),
        }
        let (mut values, mut expect_value, mut saw_comma) = (Vec::new(), true, false);
        loop {
            match self.bump() {
                (Tok::Ident(v), _) if expect_value => {
                    values.push(v);
                    expect_value = false;
                }
                (Tok::Comma, _) => {
                    if expect_value {
                        values.push(String::new());
                    }
                    (expect_value, saw_comma) = (true, true);
                }
                (Tok::Sym(")"), _) => {
                    if expect_value && saw_comma {
                        values.push(String::new());
                    }
                    break;
                }
                (Tok::End, _) => return Err(LabelSelectorError::UnterminatedSet { key }),
                (tok @ Tok::Ident(_), pos) => return Err(unexpected(&tok, pos, "',' or ')'")),
                (tok, pos) => return Err(unexpected(&tok, pos, "label value, ',' or ')'")),
            }
        }
        if values.is_empty() {
            return Err(LabelSelectorError::EmptySet { key, operator });
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests;
