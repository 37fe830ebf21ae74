//! Tests of label selector parsing, matching and rendering.

use super::*;
use proptest::prelude::*;
use serde_json::json;

/// Rows of `|`-separated, trimmed columns.
fn rows(table: &str) -> impl Iterator<Item = Vec<&str>> {
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('|').map(str::trim).collect())
}

/// The variant name of an error, from its `Debug` form.
fn variant(e: &LabelSelectorError) -> String {
    format!("{e:?}")
        .split([' ', '('])
        .next()
        .unwrap()
        .to_owned()
}

#[test]
fn parses_to_canonical_form() {
    let table = "
        |
        a=b                            | a=b
        a == b                         | a=b
        a!=b                           | a!=b
        app in (web, seed) , tier!=x   | app in (seed,web),tier!=x
        a notin (x, y,x)               | a notin (x,y)
        a                              | a
        ! a                            | !a
        a>3,a < -3                     | a>3,a<-3
        a=,b!=                         | a=,b!=
        z=1,example.com/app=v-1.2_3    | example.com/app=v-1.2_3,z=1
        a in (,x)                      | a in (,x)
        a in (,)                       | a in (,)
        in in (notin),notin            | in in (notin),notin";
    for row in rows(table) {
        let sel = LabelSelector::parse(row[0]).unwrap_or_else(|e| panic!("{row:?}: {e}"));
        assert_eq!(sel.to_string(), row[1], "input {:?}", row[0]);
        assert_eq!(sel.is_empty(), row[1].is_empty());
    }
    assert!(LabelSelector::parse(" \t ").unwrap().is_empty());
    let sel: LabelSelector = "a in (y,x)".parse().unwrap();
    let r = &sel.requirements()[0];
    assert_eq!(
        (r.key(), r.operator(), r.values()),
        ("a", Operator::In, &["x".to_owned(), "y".to_owned()][..])
    );
}

#[test]
fn matches_labels() {
    let labels: BTreeMap<String, String> = [("app", "web"), ("tier", "front"), ("n", "10")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
    let table = "
        | true
        app=web | true
        app==db | false
        app!=db | true
        missing!=x | true
        app in (db,web) | true
        missing in (x) | false
        app notin (web) | false
        missing notin (web) | true
        app | true
        missing | false
        !missing | true
        !app | false
        n>9,n<11 | true
        n>10 | false
        app>1 | false
        missing<5 | false
        app=web,tier=back | false
        missing= | false";
    for row in rows(table) {
        let sel = LabelSelector::parse(row[0]).unwrap();
        assert_eq!(
            sel.matches(&labels).to_string(),
            row[1],
            "selector {:?}",
            row[0]
        );
    }
    let obj = json!({"metadata": {"labels": {"app": "web", "bad": 3}}});
    let parse = |s| LabelSelector::parse(s).unwrap();
    assert!(parse("app=web,!bad").matches_object(&obj));
    assert!(!parse("app").matches_object(&json!({"metadata": {}})));
    assert!(parse("!app").matches_object(&json!({})));
}

#[test]
fn rejects_malformed_selectors() {
    let long = "x".repeat(64);
    let table = format!(
        "
        a in (x,y     | UnterminatedSet | value set for key \"a\": missing ')'
        a in ()       | EmptySet        | operator 'in' on key \"a\" needs a non-empty set
        a notin       | MissingValue    | missing value after 'notin' for key \"a\"
        a>            | MissingValue    | missing value after '>'
        a<x           | InvalidValue    | invalid value \"x\" for key \"a\": operator '<' needs an integer
        -a=b          | InvalidKey      | invalid label key \"-a\": name part must consist
        a/b/c         | InvalidKey      | at most one '/'
        Ex.com/a      | InvalidKey      | prefix part must be a lowercase RFC 1123 subdomain
        /a            | InvalidKey      | prefix part must be non-empty
        {long}=v      | InvalidKey      | name part must be no more than 63 characters
        k={long}      | InvalidValue    | must be no more than 63 characters
        a=b_          | InvalidValue    | invalid value \"b_\" for key \"a\"
        a in (x, -y)  | InvalidValue    | invalid value \"-y\"
        a=b c         | Unexpected      | found 'c' at position 4, expected: ',' or end of string
        a=b,          | Unexpected      | found end of string at position 4, expected: label key
        a=b,,c        | Unexpected      | found ','
        a in (x y)    | Unexpected      | found 'y' at position 8, expected: ',' or ')'
        !a=b          | Unexpected      | found '='
        a=(b)         | Unexpected      | found '('
        a in x        | Unexpected      | expected: '('
        a ! b         | Unexpected      | found '!'"
    );
    for row in rows(&table) {
        let err = LabelSelector::parse(row[0]).expect_err(row[0]);
        let msg = err.to_string();
        assert_eq!(variant(&err), row[1], "{:?}: {msg}", row[0]);
        assert!(msg.starts_with("unable to parse requirement: "), "{msg}");
        assert!(
            msg.contains(row[2]),
            "{:?}: {msg:?} lacks {:?}",
            row[0],
            row[2]
        );
    }
}

#[test]
fn converts_api_object_form() {
    let sel = LabelSelector::from_label_selector_json(&json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "env", "operator": "NotIn", "values": ["prod"]},
            {"key": "gone", "operator": "DoesNotExist"},
            {"key": "app", "operator": "Exists", "values": null}
        ]
    }))
    .unwrap();
    assert_eq!(
        sel.to_string(),
        "app=web,app,env notin (prod),!gone,tier in (a,b)"
    );
    let labels = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(sel.matches(&labels(&[("app", "web"), ("tier", "b")])));
    assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "b"), ("env", "prod")])));
    for empty in [
        json!(null),
        json!({}),
        json!({"matchLabels": null, "matchExpressions": []}),
    ] {
        assert!(LabelSelector::from_label_selector_json(&empty)
            .unwrap()
            .is_empty());
    }
    let table = r#"
        {"matchExpressions":[{"key":"a","operator":"In","values":[]}]}  | EmptySet | operator 'in' on key "a"
        {"matchExpressions":[{"key":"a","operator":"Exists","values":["x"]}]} | WrongValueCount | takes no values, got 1
        {"matchExpressions":[{"key":"a","operator":"Gt","values":["1"]}]} | InvalidSelectorObject | matchExpressions[0].operator: unknown operator "Gt"
        {"matchExpressions":[{"operator":"Exists"}]} | InvalidSelectorObject | matchExpressions[0].key: required
        {"matchExpressions":[{"key":"a","operator":"In","values":"x"}]} | InvalidSelectorObject | matchExpressions[0].values: expected an array, got a string
        {"matchLabels":{"app":1}} | InvalidSelectorObject | matchLabels[app]: expected a string, got a number
        {"matchLabels":{"a b":"x"}} | InvalidKey | invalid label key "a b"
        ["app"] | InvalidSelectorObject | invalid label selector: selector: expected an object, got an array"#;
    for row in rows(table) {
        let input: Value = serde_json::from_str(row[0]).unwrap();
        let err = LabelSelector::from_label_selector_json(&input).expect_err(row[0]);
        assert_eq!(variant(&err), row[1], "{}: {err}", row[0]);
        assert!(
            err.to_string().contains(row[2]),
            "{}: {err} lacks {}",
            row[0],
            row[2]
        );
    }
}

fn requirement() -> impl Strategy<Value = Requirement> {
    let prefix = "([a-z0-9]([-a-z0-9]{0,3}[a-z0-9])?(\\.[a-z0-9]{1,4}){0,2}/)?";
    let key = format!("{prefix}[A-Za-z0-9]([-A-Za-z0-9_.]{{0,6}}[A-Za-z0-9])?|in|notin");
    let key = proptest::string::string_regex(&key).unwrap();
    let values = prop::collection::vec("([A-Za-z0-9]([-A-Za-z0-9_.]{0,6}[A-Za-z0-9])?)?", 1..4);
    let op = prop::sample::select(vec![
        Operator::Equals,
        Operator::NotEquals,
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
    ]);
    (key, op, values, any::<i64>()).prop_map(|(key, op, values, n)| {
        let values = match op {
            Operator::Exists | Operator::DoesNotExist => vec![],
            Operator::Gt | Operator::Lt => vec![n.to_string()],
            Operator::Equals | Operator::NotEquals => values[..1].to_vec(),
            Operator::In | Operator::NotIn => values,
        };
        Requirement::new(key, op, values).expect("strategy yields valid requirements")
    })
}

proptest! {
    #[test]
    fn display_round_trips(reqs in prop::collection::vec(requirement(), 0..5)) {
        let sel = LabelSelector::from_requirements(reqs);
        let text = sel.to_string();
        prop_assert_eq!(LabelSelector::parse(&text), Ok(sel), "text {:?}", text);
    }

    #[test]
    fn parse_never_panics_and_reparses(input in "[a-c =!,()<>0-9 in]{0,16}") {
        if let Ok(sel) = LabelSelector::parse(&input) {
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()), Ok(sel));
        }
    }
}
