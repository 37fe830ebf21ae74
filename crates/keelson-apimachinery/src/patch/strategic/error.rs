//! The one error type of strategic merge patch application.

/// Why a strategic merge patch could not be applied.
///
/// Every variant carries `path`: the dotted field path (list items add no
/// segment, as in [`super::PatchSchema`]) of the map or list where the
/// problem was found; `(root)` for the top-level object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicMergeError {
    /// The patch document is not a JSON object.
    #[error("strategic merge patch must be a JSON object, got {found}")]
    PatchNotObject {
        /// JSON type of the patch that was given.
        found: &'static str,
    },

    /// A `$patch` directive has a value other than `"replace"`, `"delete"`
    /// or `"merge"` (or is not a string at all).
    #[error("{path}: unknown $patch directive value {value} (expected \"replace\", \"delete\" or \"merge\")")]
    UnknownPatchDirective {
        /// Where the directive was found.
        path: String,
        /// The offending value, as JSON text.
        value: String,
    },

    /// A list item carries a `$patch` directive that is valid elsewhere but
    /// not in this list (`"merge"` anywhere in a list, `"delete"` in a list of
    /// primitives).
    #[error("{path}: $patch {directive:?} is not supported as an item of this list")]
    UnsupportedListDirective {
        /// The list.
        path: String,
        /// The directive value (`merge` or `delete`).
        directive: String,
    },

    /// An item of a list merged by key (a patch item, a `$patch: delete`
    /// item or a `$setElementOrder` item) lacks the merge key.
    #[error("{path}: list item {item} has no merge key {key:?}")]
    MissingMergeKey {
        /// The list.
        path: String,
        /// The merge key the list is merged by.
        key: String,
        /// The offending item, as JSON text.
        item: String,
    },

    /// An item of a list merged by key (or of its `$setElementOrder`) is not
    /// a JSON object.
    #[error("{path}: list merged by key {key:?} must contain objects, got {item}")]
    ListItemNotObject {
        /// The list.
        path: String,
        /// The merge key the list is merged by.
        key: String,
        /// The offending item, as JSON text.
        item: String,
    },

    /// `$setElementOrder/<field>` is not a JSON array.
    #[error("{path}: $setElementOrder/{field} must be a list, got {found}")]
    SetElementOrderNotList {
        /// The map holding the directive.
        path: String,
        /// The list field the directive orders.
        field: String,
        /// JSON type of the directive's value.
        found: &'static str,
    },

    /// `$deleteFromPrimitiveList/<field>` is not a JSON array, or contains an
    /// object or array.
    #[error(
        "{path}: $deleteFromPrimitiveList/{field} must be a list of primitive values, got {found}"
    )]
    DeleteFromPrimitiveListInvalid {
        /// The map holding the directive.
        path: String,
        /// The list field values are removed from.
        field: String,
        /// What was found instead (a JSON type or offending item).
        found: String,
    },

    /// `$retainKeys` is not a list of strings.
    #[error("{path}: $retainKeys must be a list of strings, got {found}")]
    RetainKeysInvalid {
        /// The map holding the directive.
        path: String,
        /// What was found instead (a JSON type or offending item).
        found: String,
    },

    /// The patch sets a field that its own `$retainKeys` list would drop.
    #[error("{path}: field {field:?} is set by the patch but missing from $retainKeys")]
    FieldNotInRetainKeys {
        /// The map holding the directive.
        path: String,
        /// The field set by the patch.
        field: String,
    },
}

/// Name of a JSON value's type, for error messages.
pub(crate) fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "object",
    }
}
