//! JSON Patch (RFC 6902) over `serde_json::Value`, with JSON Pointers
//! (RFC 6901).
//!
//! [`apply`] runs the operations in order on a copy of the document and
//! returns the result, or the first error; the input is never modified, so a
//! failed patch has no effect (atomicity).

use serde_json::Value;

/// Why a JSON patch could not be applied. Every variant except
/// [`NotAnArray`](JsonPatchError::NotAnArray) names the zero-based index of
/// the failing operation; location errors also name the operation and the
/// pointer as written in the patch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPatchError {
    /// The patch document is not a JSON array (`found` is its JSON type).
    #[error("invalid JSON patch: expected an array of operations, got {found}")]
    NotAnArray { found: &'static str },
    /// Operation `index` is not an object, or a member it needs (`op`,
    /// `path`, `from`, `value`) is missing or of the wrong type.
    #[error("invalid JSON patch: operation {index}: {reason}")]
    MalformedOperation { index: usize, reason: String },
    /// Operation `index` has an `op` other than add, remove, replace, move,
    /// copy, test.
    #[error("invalid JSON patch: operation {index}: unknown op \"{op}\" (expected add, remove, replace, move, copy or test)")]
    UnknownOperation { index: usize, op: String },
    /// `pointer` is not a valid JSON Pointer: it is non-empty and does not
    /// start with `/`, or has a `~` not followed by `0` or `1`.
    #[error("invalid JSON patch: operation {index} ({op}): invalid JSON pointer \"{pointer}\": {reason}")]
    InvalidPointer {
        index: usize,
        op: &'static str,
        pointer: String,
        reason: &'static str,
    },
    /// The location `pointer` (or one of its parents) does not exist.
    #[error("JSON patch operation {index} ({op}) failed: location \"{pointer}\" does not exist")]
    PathNotFound {
        index: usize,
        op: &'static str,
        pointer: String,
    },
    /// The array index `token` in `pointer` is neither `-` nor a decimal
    /// number without leading zeros.
    #[error("JSON patch operation {index} ({op}) failed: \"{pointer}\": invalid array index \"{token}\"")]
    InvalidArrayIndex {
        index: usize,
        op: &'static str,
        pointer: String,
        token: String,
    },
    /// The array index `array_index` in `pointer` is beyond the array's
    /// length `len` (for add, `len` itself is allowed: it appends).
    #[error("JSON patch operation {index} ({op}) failed: \"{pointer}\": array index {array_index} out of bounds (array length {len})")]
    IndexOutOfBounds {
        index: usize,
        op: &'static str,
        pointer: String,
        array_index: usize,
        len: usize,
    },
    /// `pointer` goes through the token `token` of a value that is neither
    /// an object nor an array (its JSON type is `found`).
    #[error("JSON patch operation {index} ({op}) failed: \"{pointer}\": cannot look up \"{token}\" in {found}")]
    NotAContainer {
        index: usize,
        op: &'static str,
        pointer: String,
        token: String,
        found: &'static str,
    },
    /// A `test` operation found `actual` (compact JSON) at `pointer`
    /// instead of `expected`.
    #[error("JSON patch operation {index} (test) failed: value at \"{pointer}\" is {actual}, expected {expected}")]
    TestFailed {
        index: usize,
        pointer: String,
        expected: String,
        actual: String,
    },
    /// A `move` whose `from` is a proper prefix of its `path`: a value
    /// cannot be moved into one of its own children.
    #[error("JSON patch operation {index} (move) failed: cannot move \"{from}\" into its own child \"{path}\"")]
    MoveIntoChild {
        index: usize,
        from: String,
        path: String,
    },
    /// A `remove` of the whole document (`path` is `""`).
    #[error("JSON patch operation {index} (remove) failed: cannot remove the whole document")]
    RemoveRoot { index: usize },
}

/// Applies the RFC 6902 `patch` (an array of operation objects) to `doc`
/// and returns the patched copy; `doc` is left untouched.
///
/// Contract, per RFC 6902: operations run in order and the first failure
/// aborts the whole patch. `add` creates or replaces an object member, or
/// inserts into an array at an index `0..=len` (`-` appends), and with path
/// `""` replaces the document; its parent must exist. `remove` and `replace`
/// need an existing target (`replace` of `""` replaces the document).
/// `move` removes `from` and adds it at `path` (`from` may not be a proper
/// prefix of `path`); `copy` adds a deep copy of `from`. `test` compares
/// with JSON equality (numbers by value, so `1` equals `1.0`; object member
/// order is irrelevant). Members other than `op`, `path`, `from`, `value`
/// are ignored.
pub fn apply(doc: &Value, patch: &Value) -> Result<Value, JsonPatchError> {
    let Value::Array(ops) = patch else {
        return Err(JsonPatchError::NotAnArray { found: kind(patch) });
    };
    let mut doc = doc.clone();
    for (index, op) in ops.iter().enumerate() {
        apply_op(&mut doc, index, op)?;
    }
    Ok(doc)
}

/// Why a location could not be resolved, before error context is attached.
enum Fault {
    NotFound,
    BadIndex(String),
    OutOfBounds(usize, usize),
    NotContainer(String, &'static str),
}

/// The operation being applied, for error reporting.
struct Ctx {
    index: usize,
    op: &'static str,
}

impl Ctx {
    fn fault(&self, pointer: &str, fault: Fault) -> JsonPatchError {
        let (index, op, pointer) = (self.index, self.op, pointer.to_owned());
        match fault {
            Fault::NotFound => JsonPatchError::PathNotFound { index, op, pointer },
            Fault::BadIndex(token) => JsonPatchError::InvalidArrayIndex {
                index,
                op,
                pointer,
                token,
            },
            Fault::OutOfBounds(array_index, len) => JsonPatchError::IndexOutOfBounds {
                index,
                op,
                pointer,
                array_index,
                len,
            },
            Fault::NotContainer(token, found) => JsonPatchError::NotAContainer {
                index,
                op,
                pointer,
                token,
                found,
            },
        }
    }

    fn malformed(&self, reason: impl Into<String>) -> JsonPatchError {
        let reason = reason.into();
        JsonPatchError::MalformedOperation {
            index: self.index,
            reason,
        }
    }

    /// Reads the string member `name` (`path` or `from`) and parses it as a
    /// JSON Pointer, returning the raw text and its unescaped tokens.
    fn pointer<'a>(
        &self,
        op: &'a serde_json::Map<String, Value>,
        name: &str,
    ) -> Result<(&'a str, Vec<String>), JsonPatchError> {
        let text = match op.get(name) {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                let found = kind(other);
                return Err(self.malformed(format!("\"{name}\" must be a string, got {found}")));
            }
            None => return Err(self.malformed(format!("missing \"{name}\""))),
        };
        let tokens = parse_pointer(text).map_err(|reason| JsonPatchError::InvalidPointer {
            index: self.index,
            op: self.op,
            pointer: text.to_owned(),
            reason,
        })?;
        Ok((text, tokens))
    }
}

fn apply_op(doc: &mut Value, index: usize, op: &Value) -> Result<(), JsonPatchError> {
    let mut ctx = Ctx { index, op: "?" };
    let Value::Object(op) = op else {
        return Err(ctx.malformed(format!("expected an object, got {}", kind(op))));
    };
    let name = match op.get("op") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(ctx.malformed(format!("\"op\" must be a string, got {}", kind(other))))
        }
        None => return Err(ctx.malformed("missing \"op\"")),
    };
    ctx.op = match name {
        "add" => "add",
        "remove" => "remove",
        "replace" => "replace",
        "move" => "move",
        "copy" => "copy",
        "test" => "test",
        _ => {
            return Err(JsonPatchError::UnknownOperation {
                index,
                op: name.to_owned(),
            })
        }
    };
    let (path, tokens) = ctx.pointer(op, "path")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| ctx.malformed("missing \"value\""))
    };
    match ctx.op {
        "add" => add(doc, &tokens, value()?).map_err(|f| ctx.fault(path, f)),
        "remove" if tokens.is_empty() => Err(JsonPatchError::RemoveRoot { index }),
        "remove" => remove(doc, &tokens)
            .map(drop)
            .map_err(|f| ctx.fault(path, f)),
        "replace" => {
            let new = value()?;
            *get_mut(doc, &tokens).map_err(|f| ctx.fault(path, f))? = new;
            Ok(())
        }
        "move" => {
            let (from, from_tokens) = ctx.pointer(op, "from")?;
            if from_tokens == tokens {
                // Moving a value onto itself is a no-op, but it must exist.
                return get(doc, &from_tokens)
                    .map(drop)
                    .map_err(|f| ctx.fault(from, f));
            }
            if tokens.starts_with(&from_tokens) {
                let (from, path) = (from.to_owned(), path.to_owned());
                return Err(JsonPatchError::MoveIntoChild { index, from, path });
            }
            let moved = remove(doc, &from_tokens).map_err(|f| ctx.fault(from, f))?;
            add(doc, &tokens, moved).map_err(|f| ctx.fault(path, f))
        }
        "copy" => {
            let (from, from_tokens) = ctx.pointer(op, "from")?;
            let copied = get(doc, &from_tokens)
                .map_err(|f| ctx.fault(from, f))?
                .clone();
            add(doc, &tokens, copied).map_err(|f| ctx.fault(path, f))
        }
        _ => {
            let expected = value()?;
            let actual = get(doc, &tokens).map_err(|f| ctx.fault(path, f))?;
            if json_equal(actual, &expected) {
                Ok(())
            } else {
                Err(JsonPatchError::TestFailed {
                    index,
                    pointer: path.to_owned(),
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                })
            }
        }
    }
}

/// Splits an RFC 6901 pointer into unescaped reference tokens
/// (`~1` → `/`, `~0` → `~`). `""` is the whole document (no tokens).
fn parse_pointer(pointer: &str) -> Result<Vec<String>, &'static str> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err("a non-empty pointer must start with '/'");
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err("'~' must be followed by '0' or '1'"),
                }
            }
            Ok(out)
        })
        .collect()
}

/// Parses an array index token: `0` or a decimal without leading zeros.
fn array_index(token: &str) -> Result<usize, Fault> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return Err(Fault::BadIndex(token.to_owned()));
    }
    // All digits but too large for usize: certainly out of bounds.
    Ok(token.parse().unwrap_or(usize::MAX))
}

/// The existing element of `container` named by `token`. `-` names the
/// (nonexistent) element past the end of an array.
fn child<'a>(container: &'a Value, token: &str) -> Result<&'a Value, Fault> {
    match container {
        Value::Object(map) => map.get(token).ok_or(Fault::NotFound),
        Value::Array(_) if token == "-" => Err(Fault::NotFound),
        Value::Array(items) => {
            let i = array_index(token)?;
            items.get(i).ok_or(Fault::OutOfBounds(i, items.len()))
        }
        other => Err(Fault::NotContainer(token.to_owned(), kind(other))),
    }
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Result<&'a Value, Fault> {
    tokens.iter().try_fold(doc, |v, t| child(v, t))
}

fn get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, Fault> {
    let mut current = doc;
    for token in tokens {
        // Resolve immutably first for uniform errors, then take the same path mutably.
        child(current, token)?;
        current = match current {
            Value::Object(map) => map.get_mut(token.as_str()),
            Value::Array(items) => items.get_mut(array_index(token)?),
            _ => None,
        }
        .ok_or(Fault::NotFound)?;
    }
    Ok(current)
}

fn add(doc: &mut Value, tokens: &[String], value: Value) -> Result<(), Fault> {
    let Some((last, parent)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
        }
        Value::Array(items) if last == "-" => items.push(value),
        Value::Array(items) => {
            let i = array_index(last)?;
            if i > items.len() {
                return Err(Fault::OutOfBounds(i, items.len()));
            }
            items.insert(i, value);
        }
        other => return Err(Fault::NotContainer(last.clone(), kind(other))),
    }
    Ok(())
}

/// Removes and returns the value at `tokens` (which must be non-empty).
fn remove(doc: &mut Value, tokens: &[String]) -> Result<Value, Fault> {
    let Some((last, parent)) = tokens.split_last() else {
        return Err(Fault::NotFound);
    };
    let parent = get_mut(doc, parent)?;
    child(parent, last)?;
    match parent {
        Value::Object(map) => map.remove(last.as_str()).ok_or(Fault::NotFound),
        Value::Array(items) => Ok(items.remove(array_index(last)?)),
        _ => Err(Fault::NotFound),
    }
}

/// JSON equality: numbers compare by value (`1 == 1.0`), objects ignore
/// member order, arrays compare element-wise.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each row: `document | patch | expected document`, or
    /// `document | patch | ERR <Variant>: <message fragment>`.
    fn check(table: &str) {
        for row in table.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let cols: Vec<&str> = row.split(" | ").map(str::trim).collect();
            let parse =
                |s: &str| serde_json::from_str::<Value>(s).unwrap_or_else(|e| panic!("{row}: {e}"));
            let (doc, patch) = (parse(cols[0]), parse(cols[1]));
            let result = apply(&doc, &patch);
            match cols[2].strip_prefix("ERR ") {
                None => assert_eq!(result, Ok(parse(cols[2])), "{row}"),
                Some(expected) => {
                    let (variant, fragment) = expected.split_once(": ").unwrap();
                    let err = result.expect_err(row);
                    assert!(
                        format!("{err:?}").starts_with(variant),
                        "{row}: got {err:?}"
                    );
                    assert!(
                        err.to_string().contains(fragment),
                        "{row}: {err} lacks {fragment:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn add() {
        check(
            r#"
            {"a":1} | [{"op":"add","path":"/b","value":2}] | {"a":1,"b":2}
            {"a":1} | [{"op":"add","path":"/a","value":[3]}] | {"a":[3]}
            {"a":[1,2]} | [{"op":"add","path":"/a/0","value":0}] | {"a":[0,1,2]}
            {"a":[1,2]} | [{"op":"add","path":"/a/2","value":3}] | {"a":[1,2,3]}
            {"a":[1,2]} | [{"op":"add","path":"/a/-","value":{"x":null}}] | {"a":[1,2,{"x":null}]}
            {"a":1} | [{"op":"add","path":"","value":[true]}] | [true]
            {} | [{"op":"add","path":"/a~1b~0c","value":1},{"op":"add","path":"/","value":2}] | {"a/b~c":1,"":2}
            {"a":[1]} | [{"op":"add","path":"/a/2","value":3}] | ERR IndexOutOfBounds: "/a/2": array index 2 out of bounds (array length 1)
            {"a":[1]} | [{"op":"add","path":"/a/01","value":3}] | ERR InvalidArrayIndex: invalid array index "01"
            {"a":[1]} | [{"op":"add","path":"/a/x","value":3}] | ERR InvalidArrayIndex: "x"
            {"a":1} | [{"op":"add","path":"/b/c","value":3}] | ERR PathNotFound: operation 0 (add) failed: location "/b/c" does not exist
            {"a":1} | [{"op":"add","path":"/a/c","value":3}] | ERR NotAContainer: cannot look up "c" in a number
            {"a":1} | [{"op":"add","path":"/b"}] | ERR MalformedOperation: operation 0: missing "value"
        "#,
        );
    }

    #[test]
    fn remove_and_replace() {
        check(
            r#"
            {"a":1,"b":2} | [{"op":"remove","path":"/a"}] | {"b":2}
            {"a":[1,2,3]} | [{"op":"remove","path":"/a/1"}] | {"a":[1,3]}
            {"a":{"b":null}} | [{"op":"remove","path":"/a/b"}] | {"a":{}}
            {"a":1} | [{"op":"remove","path":"/b"}] | ERR PathNotFound: location "/b" does not exist
            {"a":[1]} | [{"op":"remove","path":"/a/1"}] | ERR IndexOutOfBounds: array index 1 out of bounds (array length 1)
            {"a":[1]} | [{"op":"remove","path":"/a/-"}] | ERR PathNotFound: "/a/-"
            {"a":1} | [{"op":"remove","path":""}] | ERR RemoveRoot: cannot remove the whole document
            {"a":1} | [{"op":"replace","path":"/a","value":{"b":2}}] | {"a":{"b":2}}
            {"a":[1,2]} | [{"op":"replace","path":"/a/1","value":null}] | {"a":[1,null]}
            {"a":1} | [{"op":"replace","path":"","value":"doc"}] | "doc"
            {"a":1} | [{"op":"replace","path":"/b","value":2}] | ERR PathNotFound: operation 0 (replace) failed: location "/b"
            {"a":[1]} | [{"op":"replace","path":"/a/-","value":2}] | ERR PathNotFound: "/a/-"
        "#,
        );
    }

    #[test]
    fn move_and_copy() {
        check(
            r#"
            {"a":{"b":1},"c":[]} | [{"op":"move","from":"/a/b","path":"/c/-"}] | {"a":{},"c":[1]}
            {"a":[1,2,3]} | [{"op":"move","from":"/a/0","path":"/a/2"}] | {"a":[2,3,1]}
            {"a":1} | [{"op":"move","from":"/a","path":"/a"}] | {"a":1}
            {"a":{"b":1}} | [{"op":"move","from":"/a","path":"/a/b/c"}] | ERR MoveIntoChild: cannot move "/a" into its own child "/a/b/c"
            {"a":1} | [{"op":"move","from":"/x","path":"/y"}] | ERR PathNotFound: location "/x" does not exist
            {"a":1} | [{"op":"move","path":"/y"}] | ERR MalformedOperation: missing "from"
            {"a":{"b":[1]}} | [{"op":"copy","from":"/a","path":"/c"}] | {"a":{"b":[1]},"c":{"b":[1]}}
            {"a":[1,2]} | [{"op":"copy","from":"/a/1","path":"/a/0"}] | {"a":[2,1,2]}
            {"a":1} | [{"op":"copy","from":"/b","path":"/c"}] | ERR PathNotFound: operation 0 (copy) failed: location "/b"
            {"a":1} | [{"op":"copy","from":"/a","path":"/x/y"}] | ERR PathNotFound: location "/x/y"
        "#,
        );
    }

    #[test]
    fn test_op_uses_json_equality() {
        check(
            r#"
            {"a":1} | [{"op":"test","path":"/a","value":1.0}] | {"a":1}
            {"a":{"x":[1,{"y":null}],"z":"s"}} | [{"op":"test","path":"/a","value":{"z":"s","x":[1,{"y":null}]}}] | {"a":{"x":[1,{"y":null}],"z":"s"}}
            {"a":null} | [{"op":"test","path":"/a","value":null}] | {"a":null}
            {"a":[1,2]} | [{"op":"test","path":"/a","value":[2,1]}] | ERR TestFailed: operation 0 (test) failed: value at "/a" is [1,2], expected [2,1]
            {"a":"1"} | [{"op":"test","path":"/a","value":1}] | ERR TestFailed: is "1", expected 1
            {"a":{"b":1}} | [{"op":"test","path":"/a","value":{"b":1,"c":2}}] | ERR TestFailed: expected
            {"a":1} | [{"op":"test","path":"/b","value":1}] | ERR PathNotFound: location "/b"
        "#,
        );
    }

    #[test]
    fn rejects_malformed_patches() {
        check(
            r#"
            {} | {"op":"add"} | ERR NotAnArray: expected an array of operations, got an object
            {} | [1] | ERR MalformedOperation: operation 0: expected an object, got a number
            {} | [{"path":"/a"}] | ERR MalformedOperation: missing "op"
            {} | [{"op":7,"path":"/a"}] | ERR MalformedOperation: "op" must be a string
            {} | [{"op":"merge","path":"/a"}] | ERR UnknownOperation: unknown op "merge"
            {} | [{"op":"remove"}] | ERR MalformedOperation: missing "path"
            {} | [{"op":"remove","path":3}] | ERR MalformedOperation: "path" must be a string, got a number
            {} | [{"op":"add","path":"a","value":1}] | ERR InvalidPointer: invalid JSON pointer "a": a non-empty pointer must start with '/'
            {} | [{"op":"add","path":"/a~2","value":1}] | ERR InvalidPointer: '~' must be followed by '0' or '1'
            {} | [{"op":"copy","from":"/~","path":"/a"}] | ERR InvalidPointer: operation 0 (copy): invalid JSON pointer "/~"
        "#,
        );
    }

    #[test]
    fn applies_in_order_and_is_atomic() {
        let doc = json!({"a": 1});
        let patch = json!([
            {"op": "add", "path": "/b", "value": 2},
            {"op": "test", "path": "/b", "value": 2},
            {"op": "remove", "path": "/a"},
            {"op": "test", "path": "/a", "value": 1}
        ]);
        let err = apply(&doc, &patch).unwrap_err();
        assert_eq!(
            err,
            JsonPatchError::PathNotFound {
                index: 3,
                op: "test",
                pointer: "/a".into()
            }
        );
        assert_eq!(doc, json!({"a": 1}));
        assert_eq!(apply(&doc, &json!([])), Ok(doc.clone()));
        let ok = json!([{"op": "add", "path": "/b", "value": 2}, {"op": "move", "from": "/a", "path": "/c"}]);
        assert_eq!(apply(&doc, &ok), Ok(json!({"b": 2, "c": 1})));
    }
}
