//! JSON Patch (RFC 6902) over `serde_json::Value`, with JSON Pointers
//! (RFC 6901).
//!
//! [`apply`] runs the operations in order on a copy of the document and
//! returns the result, or the first error; the input is never modified, so a
//! failed patch has no effect (atomicity). The operations themselves are the
//! `json-patch` crate's; what stays here is Kubernetes' side: the error
//! wording API clients see, and `test`'s JSON (not `serde_json`) equality.

use json_patch::jsonptr::{self, Pointer, PointerBuf};
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchErrorKind, PatchOperation, RemoveOperation,
    ReplaceOperation, TestOperation,
};
use serde_json::{Map, Value};

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
///
/// The operations are read here (so a malformed one is named as
/// Kubernetes users see it) and applied by the `json-patch` crate one at a
/// time; when the crate refuses one, the location is resolved again with
/// `jsonptr` to say exactly what is wrong with it. `test` is judged here:
/// the crate compares with `serde_json` equality, under which `1 != 1.0`.
pub fn apply(doc: &Value, patch: &Value) -> Result<Value, JsonPatchError> {
    let Value::Array(ops) = patch else {
        return Err(JsonPatchError::NotAnArray { found: kind(patch) });
    };
    let mut doc = doc.clone();
    for (index, op) in ops.iter().enumerate() {
        let (ctx, op) = read_op(index, op)?;
        match &op {
            PatchOperation::Remove(r) if r.path.is_root() => {
                return Err(JsonPatchError::RemoveRoot { index })
            }
            // Moving a value onto itself changes nothing, but it must exist.
            PatchOperation::Move(m) if m.path == m.from => {
                existing(&doc, &m.from).map_err(|f| ctx.fault(&m.from, f))?;
            }
            PatchOperation::Move(m) if m.path.starts_with(&m.from) => {
                let (from, path) = (m.from.to_string(), m.path.to_string());
                return Err(JsonPatchError::MoveIntoChild { index, from, path });
            }
            PatchOperation::Test(t) => test(&ctx, &doc, t)?,
            _ => {
                if let Err(e) = json_patch::patch_unsafe(&mut doc, std::slice::from_ref(&op)) {
                    // The crate changes nothing before refusing, except that a
                    // refused `move` has already removed its `from`, as RFC
                    // 6902 describes it; `doc` is the document the failing
                    // location is judged on either way.
                    return Err(ctx.explain(&doc, &op, &e.kind));
                }
            }
        }
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
    fn fault(&self, pointer: &Pointer, fault: Fault) -> JsonPatchError {
        let (index, op, pointer) = (self.index, self.op, pointer.to_string());
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

    /// Reads the string member `name` (`path` or `from`) as a JSON Pointer.
    fn pointer(&self, op: &Map<String, Value>, name: &str) -> Result<PointerBuf, JsonPatchError> {
        let text = match op.get(name) {
            Some(Value::String(s)) => s.as_str(),
            Some(other) => {
                let found = kind(other);
                return Err(self.malformed(format!("\"{name}\" must be a string, got {found}")));
            }
            None => return Err(self.malformed(format!("missing \"{name}\""))),
        };
        PointerBuf::parse(text).map_err(|e| JsonPatchError::InvalidPointer {
            index: self.index,
            op: self.op,
            pointer: text.to_owned(),
            reason: match e.original() {
                jsonptr::ParseError::NoLeadingSlash => "a non-empty pointer must start with '/'",
                jsonptr::ParseError::InvalidEncoding { .. } => "'~' must be followed by '0' or '1'",
            },
        })
    }

    /// The precise reason the crate refused `op` (`kind` says whether it was
    /// the `from` or the `path` location), judged on `doc`.
    fn explain(&self, doc: &Value, op: &PatchOperation, kind: &PatchErrorKind) -> JsonPatchError {
        let from = match op {
            PatchOperation::Move(m) => Some(&m.from),
            PatchOperation::Copy(c) => Some(&c.from),
            _ => None,
        };
        let (pointer, insert) = match (kind, from) {
            (PatchErrorKind::InvalidFromPointer, Some(from)) => (&**from, false),
            _ => (
                op.path(),
                matches!(
                    op,
                    PatchOperation::Add(_) | PatchOperation::Move(_) | PatchOperation::Copy(_)
                ),
            ),
        };
        let found = if insert {
            insertion_point(doc, pointer)
        } else {
            existing(doc, pointer).map(drop)
        };
        self.fault(pointer, found.err().unwrap_or(Fault::NotFound))
    }
}

/// Reads operation `index`: its `op`, then `path`, then `from` or `value`.
fn read_op(index: usize, op: &Value) -> Result<(Ctx, PatchOperation), JsonPatchError> {
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
    let path = ctx.pointer(op, "path")?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| ctx.malformed("missing \"value\""))
    };
    let op = match ctx.op {
        "add" => PatchOperation::Add(AddOperation {
            path,
            value: value()?,
        }),
        "remove" => PatchOperation::Remove(RemoveOperation { path }),
        "replace" => PatchOperation::Replace(ReplaceOperation {
            path,
            value: value()?,
        }),
        "move" => PatchOperation::Move(MoveOperation {
            from: ctx.pointer(op, "from")?,
            path,
        }),
        "copy" => PatchOperation::Copy(CopyOperation {
            from: ctx.pointer(op, "from")?,
            path,
        }),
        _ => PatchOperation::Test(TestOperation {
            path,
            value: value()?,
        }),
    };
    Ok((ctx, op))
}

fn test(ctx: &Ctx, doc: &Value, t: &TestOperation) -> Result<(), JsonPatchError> {
    let actual = existing(doc, &t.path).map_err(|f| ctx.fault(&t.path, f))?;
    if json_equal(actual, &t.value) {
        return Ok(());
    }
    Err(JsonPatchError::TestFailed {
        index: ctx.index,
        pointer: t.path.to_string(),
        expected: t.value.to_string(),
        actual: actual.to_string(),
    })
}

/// Resolves an existing location. `-` names the (nonexistent) element past
/// the end of an array, so it is not found rather than out of bounds.
fn existing<'a>(doc: &'a Value, pointer: &Pointer) -> Result<&'a Value, Fault> {
    use jsonptr::resolve::Error;
    pointer.resolve(doc).map_err(|e| {
        let position = match e {
            Error::NotFound { .. } => return Fault::NotFound,
            Error::FailedToParseIndex { position, .. }
            | Error::OutOfBounds { position, .. }
            | Error::Unreachable { position, .. } => position,
        };
        let token = pointer
            .get(position)
            .expect("the failing token is in the pointer");
        let parent = pointer.get(..position).and_then(|p| p.resolve(doc).ok());
        match (e, parent) {
            (Error::Unreachable { .. }, Some(parent)) => {
                Fault::NotContainer(token.decoded().into_owned(), kind(parent))
            }
            (Error::OutOfBounds { .. }, _) if token.encoded() == "-" => Fault::NotFound,
            (Error::OutOfBounds { source, .. }, _) => {
                Fault::OutOfBounds(source.index, source.length)
            }
            (_, parent) => index_fault(
                &token.decoded(),
                parent.and_then(Value::as_array).map_or(0, Vec::len),
            ),
        }
    })
}

/// Checks the location an `add` writes to: its parent must exist and be an
/// object, or an array with the last token `-` or an index `0..=len`.
fn insertion_point(doc: &Value, pointer: &Pointer) -> Result<(), Fault> {
    let Some((parent, last)) = pointer.split_back() else {
        return Ok(());
    };
    match existing(doc, parent)? {
        Value::Object(_) => Ok(()),
        Value::Array(items) => match last.to_index() {
            Ok(i) => i
                .for_len_incl(items.len())
                .map(drop)
                .map_err(|e| Fault::OutOfBounds(e.index, e.length)),
            Err(_) => Err(index_fault(&last.decoded(), items.len())),
        },
        other => Err(Fault::NotContainer(
            last.decoded().into_owned(),
            kind(other),
        )),
    }
}

/// An array index that does not parse: all digits but beyond `usize` is
/// certainly out of bounds; anything else (leading zeros, signs, letters)
/// is not an index.
fn index_fault(token: &str, len: usize) -> Fault {
    if !token.is_empty() && !token.starts_with('0') && token.bytes().all(|b| b.is_ascii_digit()) {
        Fault::OutOfBounds(usize::MAX, len)
    } else {
        Fault::BadIndex(token.to_owned())
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
            {"a":[1]} | [{"op":"add","path":"/a/x~1y","value":3}] | ERR InvalidArrayIndex: "/a/x~1y": invalid array index "x/y"
            {"a":[1]} | [{"op":"add","path":"/a/99999999999999999999999","value":3}] | ERR IndexOutOfBounds: array index 18446744073709551615 out of bounds (array length 1)
            {"a":[[1]]} | [{"op":"add","path":"/a/+0/0","value":3}] | ERR InvalidArrayIndex: invalid array index "+0"
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
            {"a":1} | [{"op":"move","from":"","path":""}] | {"a":1}
            {"a":[1]} | [{"op":"move","from":"/a/-","path":"/a/-"}] | ERR PathNotFound: location "/a/-" does not exist
            {"a":[1]} | [{"op":"move","from":"/a/0","path":"/a/5"}] | ERR IndexOutOfBounds: "/a/5": array index 5 out of bounds (array length 0)
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
