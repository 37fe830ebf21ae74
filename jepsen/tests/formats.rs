//! Parsers: Jepsen log, Jepsen EDN, Keelson JSON Lines, and the EDN reader.

use keelson_jepsen::edn::{self, Edn, EdnError};
use keelson_jepsen::formats::{load, parse, Format, FormatError};
use keelson_jepsen::history::{parse_jsonl, EventKind, Function, HistoryEvent, Value};
use keelson_jepsen::ops::Outcome;

fn line_of(err: FormatError) -> (usize, String) {
    match err {
        FormatError::Line { line, message, .. } => (line, message),
        other => panic!("expected a line error, got {other}"),
    }
}

#[test]
fn jepsen_log_lines() {
    let text = "2015-01-01 INFO  jepsen.core - Running test\n\
                INFO  jepsen.util - 3\t:invoke\t:cas\t[3 0]\n\
                INFO  jepsen.util - 4\t:invoke\t:write\t2\n\
                INFO  jepsen.util - :nemesis\t:info\t:start\tnil\n\
                INFO  jepsen.util - 3\t:ok\t:cas\t[3 0]\n\
                INFO  jepsen.util - 4\t:info\t:write\t:timed-out\n\
                INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\
                INFO  jepsen.util - 0\t:ok\t:read\t7\n\
                INFO  jepsen.util - 1\t:invoke\t:read\tnil\n\
                some trailing noise\n";
    let loaded = parse(Format::JepsenLog, text, "log").expect("parses");
    assert_eq!(loaded.events.len(), 7);
    assert_eq!(loaded.nemesis_lines, 1);
    assert_eq!(loaded.ignored_lines, 2);
    assert_eq!(loaded.lines[0], 2);
    let e = &loaded.events[0];
    assert_eq!(
        (e.process, e.kind, e.f),
        (3, EventKind::Invoke, Function::Cas)
    );
    assert_eq!(e.value, Value::pair(Value::Int(3), Value::Int(0)));
    let ops = loaded.operations().expect("pairs");
    assert_eq!(ops.len(), 4);
    assert_eq!(ops[0].outcome, Outcome::Ok);
    // The info keeps the invoked value, not :timed-out.
    assert_eq!(
        (ops[1].outcome, ops[1].value.clone()),
        (Outcome::Info, Value::Int(2))
    );
    assert_eq!(ops[1].complete_time, Some(6));
    // The read's result comes from the completion.
    assert_eq!(ops[2].output, Value::Int(7));
    // An invoke never completed is open until the end.
    assert_eq!(
        (ops[3].outcome, ops[3].complete_time),
        (Outcome::Info, None)
    );
}

#[test]
fn jepsen_log_errors_name_the_line() {
    let bad_value =
        "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 3\t:invoke\t:cas\t[3 0\n";
    let (line, message) = line_of(parse(Format::JepsenLog, bad_value, "f").expect_err("bad value"));
    assert_eq!(line, 2);
    assert!(message.contains("bad value"), "{message}");

    let bad_f = "INFO  jepsen.util - 3\t:invoke\t:frobnicate\t1\n";
    let (line, message) = line_of(parse(Format::JepsenLog, bad_f, "f").expect_err("bad f"));
    assert_eq!(line, 1);
    assert!(message.contains("frobnicate"), "{message}");

    let bad_type = "INFO  jepsen.util - 3\t:bogus\t:read\tnil\n";
    assert_eq!(
        line_of(parse(Format::JepsenLog, bad_type, "f").expect_err("bad type")).0,
        1
    );

    let bad_symbol = "INFO  jepsen.util - 3\t:invoke\t:write\tabc\n";
    assert_eq!(
        line_of(parse(Format::JepsenLog, bad_symbol, "f").expect_err("symbol")).0,
        1
    );

    let orphan =
        "INFO  jepsen.util - 0\t:invoke\t:read\tnil\nINFO  jepsen.util - 3\t:ok\t:read\t1\n";
    let loaded = parse(Format::JepsenLog, orphan, "f").expect("parses");
    let (line, message) = line_of(loaded.operations().expect_err("orphan completion"));
    assert_eq!(line, 2);
    assert!(message.contains("no matching invoke"), "{message}");

    let mismatch =
        "INFO  jepsen.util - 3\t:invoke\t:read\tnil\nINFO  jepsen.util - 3\t:ok\t:write\t1\n";
    let loaded = parse(Format::JepsenLog, mismatch, "f").expect("parses");
    assert_eq!(line_of(loaded.operations().expect_err("mismatch")).0, 2);
}

#[test]
fn jepsen_edn_lines() {
    let text = r#"{:process 4, :type :invoke, :f :append, :key "1", :value "x 4 0 y"}
{:process :nemesis, :type :info, :f :start, :value nil}
{:process 1, :type :invoke, :f :get, :key "9", :value nil, :time 12, :index 3}
{:process 1, :type :ok, :f :get, :key "9", :value "x 2 0 y", :meta {:node "n1", :tags #{:a :b}}}

; a comment
{:process 4, :type :info, :f :append, :key "1", :value "x 4 0 y", :error [:timeout "no \"reply\""]}
{:process 5, :type :invoke, :f :put, :key 7, :value "v"}
{:process 5, :type :fail, :f :put, :key 7, :value "v", :error #error {:cause "boom"}}
"#;
    let loaded = parse(Format::JepsenEdn, text, "edn").expect("parses");
    assert_eq!(loaded.events.len(), 6);
    assert_eq!(loaded.nemesis_lines, 1);
    let ops = loaded.operations().expect("pairs");
    assert_eq!(ops.len(), 3);
    assert_eq!(ops[0].key.as_deref(), Some("1"));
    assert_eq!(ops[0].outcome, Outcome::Info);
    assert_eq!(ops[1].output, Value::str("x 2 0 y"));
    assert_eq!(ops[2].key.as_deref(), Some("7"));
    assert_eq!(ops[2].outcome, Outcome::Fail);
}

#[test]
fn jepsen_edn_errors_name_the_line() {
    let cases = [
        (
            "{:process 1, :type :invoke, :f :get, :key \"9\", :value \"abc}\n",
            "bad EDN",
        ),
        ("{:process 1, :type :invoke, :f :get, :key}\n", "odd number"),
        ("{:process 1, :f :get, :key \"9\"}\n", "missing :type"),
        ("{:process 1, :type :done, :f :get}\n", "unknown :type"),
        ("{:process 1, :type :invoke, :f :explode}\n", "unknown :f"),
        ("{:type :invoke, :f :get}\n", "missing :process"),
        ("[1 2 3]\n", "expected a map"),
    ];
    for (text, expected) in cases {
        let input =
            format!("{{:process 0, :type :invoke, :f :get, :key \"1\", :value nil}}\n{text}");
        let (line, message) = line_of(parse(Format::JepsenEdn, &input, "edn").expect_err(text));
        assert_eq!(line, 2, "{text}");
        assert!(message.contains(expected), "{text}: {message}");
    }
}

#[test]
fn edn_reader() {
    let v = edn::parse(r#"{:a [1 -2 +3 4N 1.5 1/2], "s\n\"q\"\u0041" #{:x} :b (nil true false \c \newline) #_ :gone :c #inst "2020"}"#)
        .expect("parses");
    let Edn::Map(entries) = &v else { panic!("map") };
    assert_eq!(entries.len(), 4);
    assert_eq!(
        v.get("a"),
        Some(&Edn::Vector(vec![
            Edn::Int(1),
            Edn::Int(-2),
            Edn::Int(3),
            Edn::Int(4),
            Edn::Float(1.5),
            Edn::Float(0.5)
        ]))
    );
    assert_eq!(entries[1].0, Edn::Str("s\n\"q\"A".to_owned()));
    assert_eq!(entries[1].1, Edn::Set(vec![Edn::Keyword("x".to_owned())]));
    assert_eq!(
        v.get("b"),
        Some(&Edn::List(vec![
            Edn::Nil,
            Edn::Bool(true),
            Edn::Bool(false),
            Edn::Char('c'),
            Edn::Char('\n')
        ]))
    );
    assert_eq!(
        v.get("c"),
        Some(&Edn::Tagged(
            "inst".to_owned(),
            Box::new(Edn::Str("2020".to_owned()))
        ))
    );
    assert_eq!(edn::parse(" ; comment\n 42 ").expect("int"), Edn::Int(42));
    assert!(matches!(
        edn::parse("\"abc"),
        Err(EdnError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        edn::parse("[1 2"),
        Err(EdnError::UnexpectedEnd { .. })
    ));
    assert!(matches!(edn::parse("[1 2}"), Err(EdnError::Syntax { .. })));
    assert!(matches!(edn::parse("1 2"), Err(EdnError::Syntax { .. })));
    assert!(matches!(edn::parse("12abc"), Err(EdnError::Syntax { .. })));
    assert!(matches!(
        edn::parse("\"\\q\""),
        Err(EdnError::Syntax { .. })
    ));
    let deep = "[".repeat(500) + &"]".repeat(500);
    assert!(matches!(edn::parse(&deep), Err(EdnError::Syntax { .. })));
    // Printing round-trips.
    let printed = v.to_string();
    assert_eq!(edn::parse(&printed).expect("reparses"), v);
}

#[test]
fn jsonl_round_trip_and_errors() {
    let events = vec![
        HistoryEvent::new(
            3,
            EventKind::Invoke,
            Function::Cas,
            Value::pair(Value::Int(1), Value::Int(2)),
        )
        .with_key("k1")
        .at(123),
        HistoryEvent::new(
            3,
            EventKind::Ok,
            Function::Cas,
            Value::pair(Value::Int(1), Value::Int(2)),
        )
        .with_key("k1")
        .at(130),
    ];
    let text: String = events
        .iter()
        .map(|e| e.to_json_line().expect("serializes") + "\n")
        .collect();
    assert!(
        text.starts_with(
            r#"{"process":3,"type":"invoke","f":"cas","key":"k1","value":[1,2],"time":123}"#
        ),
        "{text}"
    );
    let parsed: Vec<HistoryEvent> = parse_jsonl(&text)
        .expect("parses")
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    assert_eq!(parsed, events);

    // Unknown fields are ignored; nulls and missing values are nil.
    let lenient = r#"{"process":1,"type":"ok","f":"read","value":null,"time":5,"extra":{"x":1}}"#;
    let parsed = parse_jsonl(lenient).expect("parses");
    assert_eq!(parsed[0].1.value, Value::Nil);

    let bad = "{\"process\":1,\"type\":\"invoke\",\"f\":\"read\",\"time\":1}\n\n{\"process\":1,\"type\":\"okay\",\"f\":\"read\",\"time\":2}\n";
    let (line, message) = line_of(parse(Format::Keelson, bad, "h.jsonl").expect_err("bad type"));
    assert_eq!(line, 3);
    assert!(message.contains("okay"), "{message}");
    let bad_json = "{\"process\":1,";
    assert_eq!(
        line_of(parse(Format::Keelson, bad_json, "h.jsonl").expect_err("truncated")).0,
        1
    );
}

#[test]
fn missing_file_is_an_io_error() {
    let err = load(
        Format::Keelson,
        std::path::Path::new("/nonexistent/history.jsonl"),
    )
    .expect_err("missing");
    assert!(matches!(err, FormatError::Io { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/history.jsonl"));
}

#[test]
fn format_names_parse() {
    for f in [Format::JepsenLog, Format::JepsenEdn, Format::Keelson] {
        assert_eq!(f.name().parse::<Format>(), Ok(f));
    }
    assert!("xml".parse::<Format>().is_err());
}

#[test]
fn jepsen_edn_independent_register_tuples() {
    let text = r#"{:type :invoke, :f :write, :value [1 3], :process 0, :time 10, :index 0}
{:type :invoke, :f :cas, :value [2 [nil 4]], :process 1, :time 11, :index 1}
{:type :ok, :f :write, :value [1 3], :process 0, :time 12, :index 2}
{:type :invoke, :f :read, :value [1 nil], :process 0, :time 13, :index 3}
{:type :ok, :f :read, :value [1 3], :process 0, :time 14, :index 4}
{:type :info, :f :cas, :value [2 [nil 4]], :process 1, :time 15, :error :timeout}
"#;
    let loaded = parse(Format::JepsenEdn, text, "edn").expect("parses");
    let ops = loaded.operations().expect("pairs");
    assert_eq!(ops.len(), 3);
    assert_eq!(
        (ops[0].key.as_deref(), &ops[0].value),
        (Some("1"), &Value::Int(3))
    );
    assert_eq!(
        (ops[1].key.as_deref(), &ops[1].value),
        (Some("2"), &Value::pair(Value::Nil, Value::Int(4)))
    );
    assert_eq!(ops[2].output, Value::Int(3));
    // Plain register histories are left alone.
    let plain = "{:type :invoke, :f :cas, :value [1 2], :process 0}\n{:type :invoke, :f :write, :value 2, :process 1}\n";
    let loaded = parse(Format::JepsenEdn, plain, "edn").expect("parses");
    assert_eq!(
        loaded.events[0].value,
        Value::pair(Value::Int(1), Value::Int(2))
    );
    assert_eq!(loaded.events[0].key, None);
}
