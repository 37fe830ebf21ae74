//! Hand-made histories for the linearizability checker.

use keelson_jepsen::formats::{parse, Format};
use keelson_jepsen::history::{EventKind, Function, HistoryEvent, Value};
use keelson_jepsen::linear::{check, LinearReport, ModelKind};
use keelson_jepsen::model::ModelError;
use keelson_jepsen::ops::{pair_events, Outcome};

/// Parses Jepsen-log style lines ("PROCESS TYPE F VALUE"); time = line.
fn register(lines: &str) -> LinearReport {
    let text: String = lines
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("INFO  jepsen.util - {}\n", l.trim()))
        .collect();
    let loaded = parse(Format::JepsenLog, &text, "test").expect("parses");
    let ops = loaded.operations().expect("pairs");
    check(ModelKind::CasRegister, &ops).expect("fits the model")
}

fn kv(lines: &str) -> LinearReport {
    let loaded = parse(Format::JepsenEdn, lines, "test").expect("parses");
    let ops = loaded.operations().expect("pairs");
    check(ModelKind::Kv, &ops).expect("fits the model")
}

fn assert_ok(report: &LinearReport) {
    assert!(
        report.is_linearizable(),
        "expected linearizable, got:\n{report}"
    );
}

fn assert_bad(report: &LinearReport) -> keelson_jepsen::KeyFailure {
    assert!(
        !report.is_linearizable(),
        "expected a violation, got: {}",
        report.summary()
    );
    report.failures[0].clone()
}

#[test]
fn empty_history_is_linearizable() {
    assert_ok(&register(""));
}

#[test]
fn sequential_write_then_read() {
    assert_ok(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :read nil
         1 :ok :read 1",
    ));
}

#[test]
fn initial_read_is_nil() {
    assert_ok(&register("0 :invoke :read nil\n0 :ok :read nil"));
    let failure = assert_bad(&register("0 :invoke :read nil\n0 :ok :read 0"));
    assert_eq!(failure.blocked.output, Value::Int(0));
}

#[test]
fn read_of_never_written_value() {
    let failure = assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :read nil
         1 :ok :read 7",
    ));
    assert_eq!(failure.blocked.f, Function::Read);
    assert_eq!(failure.blocked.output, Value::Int(7));
    assert_eq!(failure.linearization.len(), 1, "the write linearizes first");
}

#[test]
fn stale_read_after_overwrite() {
    let failure = assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         0 :invoke :write 2
         0 :ok :write 2
         1 :invoke :read nil
         1 :ok :read 1",
    ));
    assert_eq!(failure.blocked.process, 1);
    assert_eq!(failure.final_state, "2");
}

#[test]
fn lost_write() {
    assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :read nil
         1 :ok :read nil",
    ));
}

#[test]
fn ok_cas_on_wrong_value() {
    assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :cas [2 3]
         1 :ok :cas [2 3]",
    ));
    assert_ok(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :cas [1 3]
         1 :ok :cas [1 3]
         2 :invoke :read nil
         2 :ok :read 3",
    ));
}

#[test]
fn failed_cas_did_not_happen() {
    assert_ok(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :cas [1 3]
         1 :fail :cas [1 3]
         2 :invoke :read nil
         2 :ok :read 1",
    ));
    assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :cas [1 3]
         1 :fail :cas [1 3]
         2 :invoke :read nil
         2 :ok :read 3",
    ));
}

#[test]
fn concurrent_ops_can_be_reordered() {
    // Both writes overlap; the later read sees the first-invoked one, so the
    // second must be linearized before it.
    assert_ok(&register(
        "0 :invoke :write 1
         1 :invoke :write 2
         1 :ok :write 2
         0 :ok :write 1
         2 :invoke :read nil
         2 :ok :read 1",
    ));
    // A read concurrent with a write may see the old or the new value.
    for seen in ["nil", "5"] {
        assert_ok(&register(&format!(
            "0 :invoke :write 5
             1 :invoke :read nil
             1 :ok :read {seen}
             0 :ok :write 5"
        )));
    }
}

#[test]
fn reads_must_not_go_back_in_time() {
    assert_bad(&register(
        "0 :invoke :write 1
         1 :invoke :read nil
         1 :ok :read 1
         2 :invoke :read nil
         2 :ok :read nil
         0 :ok :write 1",
    ));
}

#[test]
fn info_write_observed_later_is_valid() {
    assert_ok(&register(
        "0 :invoke :write 1
         0 :info :write :timed-out
         1 :invoke :read nil
         1 :ok :read nil
         2 :invoke :read nil
         2 :ok :read 1",
    ));
}

#[test]
fn info_write_may_never_happen() {
    assert_ok(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :write 2
         1 :info :write :timed-out
         2 :invoke :read nil
         2 :ok :read 1",
    ));
}

#[test]
fn info_write_cannot_be_undone() {
    assert_bad(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :write 2
         1 :info :write :timed-out
         2 :invoke :read nil
         2 :ok :read 2
         2 :invoke :read nil
         2 :ok :read 1",
    ));
}

#[test]
fn info_write_takes_effect_after_invoke_only() {
    assert_bad(&register(
        "2 :invoke :read nil
         2 :ok :read 9
         1 :invoke :write 9
         1 :info :write :timed-out",
    ));
}

#[test]
fn ok_cas_justified_by_indeterminate_write() {
    assert_ok(&register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :write 2
         1 :info :write :timed-out
         2 :invoke :cas [2 3]
         2 :ok :cas [2 3]
         2 :invoke :read nil
         2 :ok :read 3",
    ));
}

#[test]
fn pending_invoke_at_end_is_indeterminate() {
    let report = register(
        "0 :invoke :write 4
         1 :invoke :read nil
         1 :ok :read 4",
    );
    assert_ok(&report);
    assert_eq!(report.indeterminate, 1);
}

#[test]
fn info_reads_constrain_nothing() {
    let report = register(
        "0 :invoke :write 1
         0 :ok :write 1
         1 :invoke :read nil
         1 :info :read :timed-out
         1 :invoke :read nil
         1 :fail :read :timed-out",
    );
    assert_ok(&report);
    assert_eq!(report.unknown_reads, 1);
    assert_eq!(report.failed, 1);
}

#[test]
fn process_reused_after_info_is_a_new_operation() {
    // Process 1 times out, then (against Jepsen convention) invokes again.
    let report = register(
        "1 :invoke :write 3
         1 :info :write :timed-out
         1 :invoke :write 4
         1 :ok :write 4
         2 :invoke :read nil
         2 :ok :read 3",
    );
    assert_ok(&report);
    assert_eq!(report.operations, 3);
    assert_bad(&register(
        "1 :invoke :write 3
         1 :info :write :timed-out
         1 :invoke :read nil
         1 :ok :read 5",
    ));
}

#[test]
fn double_invoke_leaves_first_indeterminate() {
    let events = vec![
        HistoryEvent::new(1, EventKind::Invoke, Function::Write, Value::Int(1)).at(1),
        HistoryEvent::new(1, EventKind::Invoke, Function::Read, Value::Nil).at(2),
        HistoryEvent::new(1, EventKind::Ok, Function::Read, Value::Int(1)).at(3),
    ];
    let ops = pair_events(&events).expect("pairs");
    assert_eq!(ops[0].outcome, Outcome::Info);
    assert_eq!(ops[0].complete_time, None);
    assert!(check(ModelKind::CasRegister, &ops)
        .expect("fits")
        .is_linearizable());
}

#[test]
fn failure_report_and_timeline() {
    let report = register(
        "0 :invoke :write 1
         0 :ok :write 1
         3 :invoke :write 9
         0 :invoke :write 2
         0 :ok :write 2
         1 :invoke :read nil
         1 :ok :read 1
         3 :ok :write 9",
    );
    let failure = assert_bad(&report);
    assert_eq!(failure.key, None);
    assert_eq!(failure.blocked.process, 1);
    assert!(failure
        .window
        .iter()
        .any(|op| op.index == failure.blocked.index));
    assert!(
        failure.window.iter().any(|op| op.process == 3),
        "concurrent op shown"
    );
    let text = failure.render_text();
    assert!(text.contains("cannot linearize"), "{text}");
    assert!(text.contains("<== cannot be linearized"), "{text}");
    let html = failure.timeline_html();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("<svg") && html.contains("#ef5350"),
        "highlighted bar"
    );
    assert!(html.contains(">p3<"), "lane per process");
    assert!(report.summary().starts_with("NOT linearizable"));
}

#[test]
fn model_errors() {
    let events = vec![
        HistoryEvent::new(1, EventKind::Invoke, Function::Get, Value::Nil).at(1),
        HistoryEvent::new(1, EventKind::Ok, Function::Get, Value::str("x")).at(2),
    ];
    let ops = pair_events(&events).expect("pairs");
    assert!(matches!(
        check(ModelKind::CasRegister, &ops),
        Err(ModelError::UnsupportedFunction {
            f: Function::Get,
            ..
        })
    ));
    let events = vec![HistoryEvent::new(1, EventKind::Invoke, Function::Cas, Value::Int(3)).at(1)];
    let ops = pair_events(&events).expect("pairs");
    assert!(matches!(
        check(ModelKind::CasRegister, &ops),
        Err(ModelError::BadValue { .. })
    ));
}

#[test]
fn keyed_registers_are_checked_per_key() {
    let mk =
        |p, kind, f, v: Value, key: &str, t| HistoryEvent::new(p, kind, f, v).with_key(key).at(t);
    let events = vec![
        mk(0, EventKind::Invoke, Function::Write, Value::Int(1), "a", 1),
        mk(0, EventKind::Ok, Function::Write, Value::Int(1), "a", 2),
        mk(1, EventKind::Invoke, Function::Read, Value::Nil, "b", 3),
        mk(1, EventKind::Ok, Function::Read, Value::Nil, "b", 4),
        mk(1, EventKind::Invoke, Function::Read, Value::Nil, "a", 5),
        mk(1, EventKind::Ok, Function::Read, Value::Int(1), "a", 6),
    ];
    let ops = pair_events(&events).expect("pairs");
    let report = check(ModelKind::CasRegister, &ops).expect("fits");
    assert_ok(&report);
    assert_eq!(report.keys, 2);
    // Reading a's value on b is a violation of key b only.
    let mut bad = events.clone();
    bad[3].value = Value::Int(1);
    let report = check(ModelKind::CasRegister, &pair_events(&bad).expect("pairs")).expect("fits");
    assert_eq!(assert_bad(&report).key.as_deref(), Some("b"));
}

#[test]
fn kv_concurrent_appends_in_either_order() {
    for seen in ["ab", "ba"] {
        assert_ok(&kv(&format!(
            r#"{{:process 0, :type :invoke, :f :append, :key "k", :value "a"}}
               {{:process 1, :type :invoke, :f :append, :key "k", :value "b"}}
               {{:process 0, :type :ok, :f :append, :key "k", :value "a"}}
               {{:process 1, :type :ok, :f :append, :key "k", :value "b"}}
               {{:process 2, :type :invoke, :f :get, :key "k", :value nil}}
               {{:process 2, :type :ok, :f :get, :key "k", :value "{seen}"}}"#
        )));
    }
}

#[test]
fn kv_sequential_appends_keep_order() {
    let failure = assert_bad(&kv(
        r#"{:process 0, :type :invoke, :f :append, :key "k", :value "a"}
        {:process 0, :type :ok, :f :append, :key "k", :value "a"}
        {:process 0, :type :invoke, :f :append, :key "k", :value "b"}
        {:process 0, :type :ok, :f :append, :key "k", :value "b"}
        {:process 2, :type :invoke, :f :get, :key "k", :value nil}
        {:process 2, :type :ok, :f :get, :key "k", :value "ba"}"#,
    ));
    assert_eq!(failure.key.as_deref(), Some("k"));
    assert_eq!(failure.blocked.f, Function::Get);
    assert!(
        failure.final_state.starts_with("\"a"),
        "{}",
        failure.final_state
    );
}

#[test]
fn kv_missing_key_reads_empty_and_put_replaces() {
    assert_ok(&kv(
        r#"{:process 0, :type :invoke, :f :get, :key "k", :value nil}
        {:process 0, :type :ok, :f :get, :key "k", :value ""}
        {:process 0, :type :invoke, :f :get, :key "k", :value nil}
        {:process 0, :type :ok, :f :get, :key "k", :value nil}
        {:process 1, :type :invoke, :f :append, :key "k", :value "x"}
        {:process 1, :type :ok, :f :append, :key "k", :value "x"}
        {:process 1, :type :invoke, :f :put, :key "k", :value "y"}
        {:process 1, :type :ok, :f :put, :key "k", :value "y"}
        {:process 1, :type :invoke, :f :append, :key "k", :value "z"}
        {:process 1, :type :ok, :f :append, :key "k", :value "z"}
        {:process 0, :type :invoke, :f :get, :key "k", :value nil}
        {:process 0, :type :ok, :f :get, :key "k", :value "yz"}"#,
    ));
}

#[test]
fn kv_info_append_observed_later() {
    assert_ok(&kv(
        r#"{:process 0, :type :invoke, :f :append, :key "k", :value "a"}
        {:process 0, :type :info, :f :append, :key "k", :value "a", :error :timeout}
        {:process 2, :type :invoke, :f :get, :key "k", :value nil}
        {:process 2, :type :ok, :f :get, :key "k", :value ""}
        {:process 2, :type :invoke, :f :get, :key "k", :value nil}
        {:process 2, :type :ok, :f :get, :key "k", :value "a"}"#,
    ));
}

#[test]
fn kv_failure_in_one_key_names_it() {
    let report = kv(
        r#"{:process 0, :type :invoke, :f :put, :key "1", :value "a"}
        {:process 0, :type :ok, :f :put, :key "1", :value "a"}
        {:process 1, :type :invoke, :f :put, :key "2", :value "b"}
        {:process 1, :type :ok, :f :put, :key "2", :value "b"}
        {:process 1, :type :invoke, :f :get, :key "2", :value nil}
        {:process 1, :type :ok, :f :get, :key "2", :value "a"}"#,
    );
    assert_eq!(assert_bad(&report).key.as_deref(), Some("2"));
    assert_eq!(report.keys, 2);
}

#[test]
fn kv_observation_is_attributed_only_to_self_delimiting_tokens() {
    // "a" occurs in the get's result, but inside "ba": the indeterminate
    // append of "a" need not have happened.
    assert_ok(&kv(
        r#"{:process 0, :type :invoke, :f :append, :key "k", :value "a"}
        {:process 0, :type :info, :f :append, :key "k", :value "a"}
        {:process 1, :type :invoke, :f :append, :key "k", :value "ba"}
        {:process 1, :type :ok, :f :append, :key "k", :value "ba"}
        {:process 1, :type :invoke, :f :get, :key "k", :value nil}
        {:process 1, :type :ok, :f :get, :key "k", :value "ba"}"#,
    ));
    // With token-shaped values the observed indeterminate append must
    // precede the get that saw it, and nothing may undo it.
    assert_bad(&kv(
        r#"{:process 0, :type :invoke, :f :append, :key "k", :value "x 0 y"}
        {:process 0, :type :info, :f :append, :key "k", :value "x 0 y"}
        {:process 1, :type :invoke, :f :get, :key "k", :value nil}
        {:process 1, :type :ok, :f :get, :key "k", :value "x 0 y"}
        {:process 1, :type :invoke, :f :get, :key "k", :value nil}
        {:process 1, :type :ok, :f :get, :key "k", :value ""}"#,
    ));
}
