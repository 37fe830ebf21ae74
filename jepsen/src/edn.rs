//! A small, generic EDN reader, enough for Jepsen history lines.
//!
//! Supports nil, booleans, integers (with an optional `N` suffix), floats
//! (optional `M` suffix) and ratios (read as floats), strings with escapes
//! (`\" \\ \n \t \r \b \f \uXXXX`), characters, keywords, symbols, lists,
//! vectors, maps, sets, tagged literals (`#inst "..."`, `#error {...}`), the
//! `#_` discard and `;` comments. Commas are whitespace. Nesting is limited
//! to [`MAX_DEPTH`] levels.

use std::fmt;

/// Maximum nesting depth of collections.
pub const MAX_DEPTH: usize = 128;

/// Errors of reading EDN; `column` is 1-based, in characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EdnError {
    /// The text ended inside a form.
    #[error("unexpected end of input at column {column}: {expected}")]
    UnexpectedEnd {
        /// Where the text ended.
        column: usize,
        /// What was being read.
        expected: &'static str,
    },
    /// A malformed form.
    #[error("column {column}: {message}")]
    Syntax {
        /// Where the problem starts.
        column: usize,
        /// What is wrong.
        message: String,
    },
}

/// An EDN value.
#[derive(Debug, Clone, PartialEq)]
pub enum Edn {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits in 64 bits.
    Int(i64),
    /// A float (also big integers and ratios).
    Float(f64),
    /// A string.
    Str(String),
    /// A character such as `\a`.
    Char(char),
    /// A keyword, without its leading `:`.
    Keyword(String),
    /// A symbol.
    Symbol(String),
    /// `( ... )`.
    List(Vec<Edn>),
    /// `[ ... ]`.
    Vector(Vec<Edn>),
    /// `{ k v ... }` in source order.
    Map(Vec<(Edn, Edn)>),
    /// `#{ ... }`.
    Set(Vec<Edn>),
    /// `#tag value`.
    Tagged(String, Box<Edn>),
}

impl Edn {
    /// Looks up a keyword key in a map (`None` for other values).
    pub fn get(&self, keyword: &str) -> Option<&Edn> {
        match self {
            Edn::Map(entries) => entries.iter().find_map(|(k, v)| match k {
                Edn::Keyword(name) if name == keyword => Some(v),
                _ => None,
            }),
            _ => None,
        }
    }
}

fn write_seq(f: &mut fmt::Formatter<'_>, open: &str, items: &[Edn], close: &str) -> fmt::Result {
    f.write_str(open)?;
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(" ")?;
        }
        write!(f, "{item}")?;
    }
    f.write_str(close)
}

impl fmt::Display for Edn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Edn::Nil => f.write_str("nil"),
            Edn::Bool(b) => write!(f, "{b}"),
            Edn::Int(i) => write!(f, "{i}"),
            Edn::Float(x) => write!(f, "{x}"),
            Edn::Str(s) => write!(f, "{s:?}"),
            Edn::Char(c) => write!(f, "\\{c}"),
            Edn::Keyword(k) => write!(f, ":{k}"),
            Edn::Symbol(s) => f.write_str(s),
            Edn::List(items) => write_seq(f, "(", items, ")"),
            Edn::Vector(items) => write_seq(f, "[", items, "]"),
            Edn::Set(items) => write_seq(f, "#{", items, "}"),
            Edn::Map(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k} {v}")?;
                }
                f.write_str("}")
            }
            Edn::Tagged(tag, v) => write!(f, "#{tag} {v}"),
        }
    }
}

/// Parses exactly one EDN form (surrounding whitespace and comments allowed).
pub fn parse(text: &str) -> Result<Edn, EdnError> {
    let mut reader = Reader {
        chars: text.chars().collect(),
        pos: 0,
    };
    let value = reader.form(0)?.ok_or(EdnError::UnexpectedEnd {
        column: reader.pos + 1,
        expected: "a form",
    })?;
    reader.skip_ws();
    if reader.pos < reader.chars.len() {
        return Err(reader.syntax("unexpected text after the form"));
    }
    Ok(value)
}

struct Reader {
    chars: Vec<char>,
    pos: usize,
}

fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '(' | ')' | '[' | ']' | '{' | '}' | '"' | ';')
}

impl Reader {
    fn syntax(&self, message: impl Into<String>) -> EdnError {
        EdnError::Syntax {
            column: self.pos + 1,
            message: message.into(),
        }
    }

    fn end(&self, expected: &'static str) -> EdnError {
        EdnError::UnexpectedEnd {
            column: self.pos + 1,
            expected,
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(c) = self.peek() {
            if c.is_whitespace() || c == ',' {
                self.pos += 1;
            } else if c == ';' {
                while let Some(c) = self.peek() {
                    if c == '\n' {
                        break;
                    }
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    /// Reads the next form; `Ok(None)` at the end of input or before a
    /// closing delimiter (left unconsumed).
    fn form(&mut self, depth: usize) -> Result<Option<Edn>, EdnError> {
        if depth > MAX_DEPTH {
            return Err(self.syntax("nesting too deep"));
        }
        loop {
            self.skip_ws();
            let Some(c) = self.peek() else {
                return Ok(None);
            };
            let value = match c {
                ')' | ']' | '}' => return Ok(None),
                '(' => {
                    self.pos += 1;
                    Edn::List(self.seq(')', depth)?)
                }
                '[' => {
                    self.pos += 1;
                    Edn::Vector(self.seq(']', depth)?)
                }
                '{' => {
                    self.pos += 1;
                    self.map(depth)?
                }
                '"' => {
                    self.pos += 1;
                    Edn::Str(self.string()?)
                }
                '\\' => {
                    self.pos += 1;
                    self.character()?
                }
                '#' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('{') => {
                            self.pos += 1;
                            Edn::Set(self.seq('}', depth)?)
                        }
                        Some('_') => {
                            self.pos += 1;
                            if self.form(depth + 1)?.is_none() {
                                return Err(self.end("a form after #_"));
                            }
                            continue;
                        }
                        Some('"') => {
                            self.pos += 1;
                            Edn::Tagged("regex".to_owned(), Box::new(Edn::Str(self.string()?)))
                        }
                        _ => {
                            let tag = self.token();
                            if tag.is_empty() {
                                return Err(self.syntax("bad dispatch character after #"));
                            }
                            let inner = self
                                .form(depth + 1)?
                                .ok_or_else(|| self.end("a tagged value"))?;
                            Edn::Tagged(tag, Box::new(inner))
                        }
                    }
                }
                _ => {
                    let start = self.pos;
                    let token = self.token();
                    if token.is_empty() {
                        return Err(self.syntax(format!("unexpected character {c:?}")));
                    }
                    self.atom(&token).map_err(|message| EdnError::Syntax {
                        column: start + 1,
                        message,
                    })?
                }
            };
            return Ok(Some(value));
        }
    }

    fn seq(&mut self, close: char, depth: usize) -> Result<Vec<Edn>, EdnError> {
        let mut items = Vec::new();
        loop {
            if let Some(item) = self.form(depth + 1)? {
                items.push(item);
                continue;
            }
            return match self.peek() {
                Some(c) if c == close => {
                    self.pos += 1;
                    Ok(items)
                }
                Some(c) => Err(self.syntax(format!("expected {close:?}, found {c:?}"))),
                None => Err(self.end("a closing delimiter")),
            };
        }
    }

    fn map(&mut self, depth: usize) -> Result<Edn, EdnError> {
        let items = self.seq('}', depth)?;
        if items.len() % 2 != 0 {
            return Err(self.syntax("map literal has an odd number of forms"));
        }
        let mut entries = Vec::with_capacity(items.len() / 2);
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            entries.push((k, v));
        }
        Ok(Edn::Map(entries))
    }

    fn string(&mut self) -> Result<String, EdnError> {
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.end("the end of a string"));
            };
            self.pos += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(self.end("an escape"));
                    };
                    self.pos += 1;
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        'b' => '\u{8}',
                        'f' => '\u{c}',
                        '"' => '"',
                        '\\' => '\\',
                        'u' => self.unicode()?,
                        other => {
                            return Err(self.syntax(format!("unknown string escape \\{other}")))
                        }
                    });
                }
                c => out.push(c),
            }
        }
    }

    fn unicode(&mut self) -> Result<char, EdnError> {
        let digits: String = self.chars.iter().skip(self.pos).take(4).collect();
        if digits.len() < 4 {
            return Err(self.end("four hex digits"));
        }
        let code = u32::from_str_radix(&digits, 16).map_err(|_| self.syntax("bad \\u escape"))?;
        self.pos += 4;
        char::from_u32(code).ok_or_else(|| self.syntax("\\u escape is not a character"))
    }

    fn character(&mut self) -> Result<Edn, EdnError> {
        let Some(first) = self.peek() else {
            return Err(self.end("a character"));
        };
        self.pos += 1;
        let mut name = String::from(first);
        while let Some(c) = self.peek() {
            if is_delimiter(c) {
                break;
            }
            name.push(c);
            self.pos += 1;
        }
        let c = match name.as_str() {
            "newline" => '\n',
            "space" => ' ',
            "tab" => '\t',
            "return" => '\r',
            "backspace" => '\u{8}',
            "formfeed" => '\u{c}',
            n if n.chars().count() == 1 => first,
            n if n.starts_with('u') && n.len() == 5 => u32::from_str_radix(&n[1..], 16)
                .ok()
                .and_then(char::from_u32)
                .ok_or_else(|| self.syntax(format!("bad character \\{n}")))?,
            n => return Err(self.syntax(format!("bad character \\{n}"))),
        };
        Ok(Edn::Char(c))
    }

    fn token(&mut self) -> String {
        let mut token = String::new();
        while let Some(c) = self.peek() {
            if is_delimiter(c) {
                break;
            }
            token.push(c);
            self.pos += 1;
        }
        token
    }

    fn atom(&self, token: &str) -> Result<Edn, String> {
        let first = token.chars().next().unwrap_or(' ');
        let second = token.chars().nth(1);
        let numeric = first.is_ascii_digit()
            || ((first == '-' || first == '+') && second.is_some_and(|c| c.is_ascii_digit()));
        if numeric {
            return parse_number(token);
        }
        if let Some(name) = token.strip_prefix(':') {
            if name.is_empty() {
                return Err("empty keyword".to_owned());
            }
            return Ok(Edn::Keyword(name.to_owned()));
        }
        Ok(match token {
            "nil" => Edn::Nil,
            "true" => Edn::Bool(true),
            "false" => Edn::Bool(false),
            s => Edn::Symbol(s.to_owned()),
        })
    }
}

fn parse_number(token: &str) -> Result<Edn, String> {
    let bad = || format!("bad number {token:?}");
    if let Some(int) = token.strip_suffix('N') {
        return int
            .parse::<i64>()
            .map(Edn::Int)
            .or_else(|_| int.parse::<f64>().map(Edn::Float))
            .map_err(|_| bad());
    }
    if let Some((num, den)) = token.split_once('/') {
        let (n, d) = (
            num.parse::<f64>().map_err(|_| bad())?,
            den.parse::<f64>().map_err(|_| bad())?,
        );
        return Ok(Edn::Float(n / d));
    }
    if let Ok(i) = token.parse::<i64>() {
        return Ok(Edn::Int(i));
    }
    let float = token.strip_suffix('M').unwrap_or(token);
    float.parse::<f64>().map(Edn::Float).map_err(|_| bad())
}
