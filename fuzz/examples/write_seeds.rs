//! Writes the seed inputs of the targets whose inputs are not already test fixtures
//! (store commands, patches, selectors, join tokens) into `fuzz/seeds/<target>/`.
//! `bash fuzz/run.sh` adds the API server's and the protobuf decoder's test fixtures.
//! Run from the repository root: `cargo run --manifest-path fuzz/Cargo.toml --example write_seeds`.

use std::path::Path;

use keelson_mvcc::{
    Command, Compare, CompareOp, CompareTarget, DeleteRangeRequest, KeyRange, Op, PutRequest, RangeRequest, TxnRequest,
};

fn put(key: &str, value: &str) -> Op {
    Op::Put(PutRequest { key: key.into(), value: value.into(), prev_kv: true })
}

fn store_seeds() -> Vec<Vec<Command>> {
    let create = |key: &str| Command::Txn(TxnRequest {
        compare: vec![Compare { key: key.into(), op: CompareOp::Equal, target: CompareTarget::ModRevision(0) }],
        success: vec![put(key, "{}")],
        failure: vec![Op::Range(RangeRequest { range: KeyRange::single(key), keys_only: true, ..Default::default() })],
    });
    vec![
        vec![create("/registry/pods/default/a"), create("/registry/pods/default/a")],
        vec![
            create("/registry/configmaps/default/a"),
            Command::Txn(TxnRequest { success: vec![put("/registry/configmaps/default/a", "{\"v\":2}")], ..Default::default() }),
            Command::Compact { revision: 1 },
            Command::Txn(TxnRequest {
                success: vec![Op::DeleteRange(DeleteRangeRequest { range: KeyRange::prefix("/registry/configmaps/"), prev_kv: true })],
                ..Default::default()
            }),
            Command::Compact { revision: 3 },
        ],
        vec![Command::Txn(TxnRequest {
            compare: vec![Compare { key: "k".into(), op: CompareOp::Greater, target: CompareTarget::Version(0) }],
            success: vec![put("k", "1")],
            failure: vec![put("k", "0"), Op::Range(RangeRequest { range: KeyRange::prefix(""), revision: 1, ..Default::default() })],
        })],
    ]
}

const PATCHES: &[(u8, &str)] = &[
    (0, r#"[{"metadata":{"name":"a","labels":{"x":"1"}}},[{"op":"add","path":"/metadata/labels/y","value":"2"},{"op":"remove","path":"/metadata/labels/x"},{"op":"test","path":"/metadata/name","value":"a"}]]"#),
    (0, r#"[{"spec":{"containers":[{"name":"c"}]}},[{"op":"move","from":"/spec/containers/0","path":"/spec/containers/-"},{"op":"copy","from":"/spec","path":"/s2"},{"op":"replace","path":"/s2/containers/0/name","value":"d"}]]"#),
    (1, r#"[{"metadata":{"labels":{"a":"1","b":"2"}},"data":{"k":"v"}},{"metadata":{"labels":{"a":null,"c":"3"}},"data":"x"}]"#),
    (1, r#"[{"a":{"b":[1,2]}},{"a":{"b":[3],"c":{"d":1}}}]"#),
    (2, r#"[{"spec":{"containers":[{"name":"a","image":"x","env":[{"name":"E","value":"1"}]},{"name":"b","image":"y"}]}},{"spec":{"containers":[{"name":"a","image":"z","env":[{"name":"F","value":"2"}]},{"name":"b","$patch":"delete"}],"$setElementOrder/containers":[{"name":"a"}]}}]"#),
    (2, r#"[{"metadata":{"finalizers":["a","b"]},"spec":{"volumes":[{"name":"v"}]}},{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]},"spec":{"volumes":[{"name":"v","$patch":"replace"}],"$retainKeys":["volumes"]}}]"#),
    (3, r#"[{"spec":{"replicas":1,"template":{"spec":{"containers":[{"name":"web","ports":[{"containerPort":80,"protocol":"TCP"}]}]}}}},{"spec":{"replicas":3,"template":{"spec":{"containers":[{"name":"web","ports":[{"containerPort":8080}]}]}}}}]"#),
];

const SELECTORS: &[&str] = &[
    "app=web,tier!=db",
    "environment in (production, qa),!canary,track notin (x)",
    "example.com/key==v-1.2_3,key",
    "metadata.name=a,metadata.namespace!=kube-system",
    "spec.nodeName=,status.phase!=Succeeded",
    "1500m",
    "2Gi",
    "1e3",
    "0.5Ki",
    "1m30.5s",
    "500ms",
];

const TOKENS: &[&str] = &[
    "K100123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef::abc123.0123456789abcdef",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
];

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("seed directory");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

fn main() {
    let seeds = Path::new("fuzz/seeds");
    for (i, commands) in store_seeds().iter().enumerate() {
        write(&seeds.join("store_commands"), &format!("seed-{i}"), &postcard::to_stdvec(commands).expect("encodes"));
    }
    for (i, (which, pair)) in PATCHES.iter().enumerate() {
        let mut bytes = vec![*which];
        bytes.extend_from_slice(pair.as_bytes());
        write(&seeds.join("patches"), &format!("seed-{i}"), &bytes);
    }
    for (i, s) in SELECTORS.iter().enumerate() {
        write(&seeds.join("selectors"), &format!("seed-{i}"), s.as_bytes());
    }
    for (i, s) in TOKENS.iter().enumerate() {
        write(&seeds.join("join_tokens_and_certificates"), &format!("seed-{i}"), s.as_bytes());
    }
}
