//! Label and field selectors, resource quantities and durations (a request's `timeout`),
//! as they arrive in query strings and object specs. Never a panic; a selector that parses
//! prints as text that parses to the same selector; a duration that parses is the same
//! written in nanoseconds.
#![no_main]

use keelson_apimachinery::fields::FieldSelector;
use keelson_apimachinery::labels::LabelSelector;
use keelson_apimachinery::quantity::parse_quantity_milli;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(selector) = LabelSelector::parse(text) {
        let printed = selector.to_string();
        let reparsed = LabelSelector::parse(&printed).unwrap_or_else(|e| panic!("{printed:?} (from {text:?}) does not parse: {e}"));
        assert_eq!(reparsed, selector, "label selector {text:?} printed as {printed:?}");
        let labels = [("app".to_string(), "web".to_string())].into_iter().collect();
        let _ = selector.matches(&labels);
    }
    if let Ok(selector) = FieldSelector::parse(text) {
        let printed = selector.to_string();
        let reparsed = FieldSelector::parse(&printed).unwrap_or_else(|e| panic!("{printed:?} (from {text:?}) does not parse: {e}"));
        assert_eq!(reparsed, selector, "field selector {text:?} printed as {printed:?}");
        let _ = selector.matches(&serde_json::json!({"metadata": {"name": "a", "namespace": "b"}}));
    }
    let _ = parse_quantity_milli(text);
    if let Ok(d) = keelson_apimachinery::duration::parse(text) {
        let nanos = format!("{}ns", d.as_nanos());
        assert_eq!(keelson_apimachinery::duration::parse(&nanos), Ok(d), "duration {text:?} as {nanos:?}");
    }
});
