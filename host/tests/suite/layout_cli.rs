//! `tessera layout` as a user runs it: the JSON contract, the table, the SVG and the
//! one-line errors.

use std::process::{Command, Output};

use serde_json::{json, Value};

fn tessera(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .arg("layout")
        .args(args)
        .output()
        .expect("the tessera binary runs")
}

fn json_text(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--json");
    let out = tessera(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&json_text(args)).expect("stdout is one JSON object")
}

/// The top-level keys in the order they are printed (a parsed `Value` sorts them).
fn top_level_keys(args: &[&str]) -> Vec<String> {
    let text = json_text(args);
    let keys: Vec<String> = json_of(args).as_object().unwrap().keys().cloned().collect();
    let mut ordered: Vec<(usize, String)> = keys
        .into_iter()
        .map(|k| {
            (
                text.find(&format!("\n  \"{k}\":"))
                    .expect("a top-level key"),
                k,
            )
        })
        .collect();
    ordered.sort();
    ordered.into_iter().map(|(_, k)| k).collect()
}

fn error_of(args: &[&str]) -> String {
    let out = tessera(args);
    assert!(!out.status.success(), "{args:?} must fail");
    assert!(out.stdout.is_empty(), "nothing on stdout for an error");
    let text = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        text.trim_end().lines().count(),
        1,
        "one-line error, got: {text}"
    );
    text
}

#[test]
fn json_has_exactly_the_documented_keys() {
    let keys = top_level_keys(&["--replicas", "8"]);
    assert_eq!(
        keys,
        [
            "grouping",
            "comm_group",
            "num_groups",
            "assignment",
            "index_in_group",
            "groups",
            "representatives",
            "transpose",
            "retrieval",
            "returning",
            "host_shape",
            "returned_shape",
            "placement",
            "collective"
        ]
    );
    let keys = top_level_keys(&["--replicas", "8", "--shape", "4", "--shard-domain", "2"]);
    assert_eq!(keys.len(), 15);
    assert_eq!(
        keys[12], "shard",
        "shard comes after returned_shape when sharded"
    );
}

#[test]
fn defaults_are_all_one_per_group_scalar() {
    let v = json_of(&["--replicas", "4"]);
    assert_eq!(
        v["grouping"],
        json!({"replicas": 4, "stride": 1, "group_size": 4})
    );
    assert_eq!(v["comm_group"], "all");
    assert_eq!(v["retrieval"], "one-per-group");
    assert_eq!(v["returning"], 1);
    assert_eq!(v["host_shape"], json!([]));
    assert_eq!(v["collective"], "none");
    assert_eq!(
        v["placement"][3],
        json!({"replica": 3, "row": 0, "pieces": [[0, 1, 0]]})
    );
}

#[test]
fn strided_grouping_with_all_replicas() {
    let v = json_of(&[
        "--replicas",
        "8",
        "--grouping",
        "2:4",
        "--retrieval",
        "all-replicas",
        "--shape",
        "2,3",
    ]);
    assert_eq!(v["assignment"], json!([0, 1, 0, 1, 0, 1, 0, 1]));
    assert_eq!(v["index_in_group"], json!([0, 0, 1, 1, 2, 2, 3, 3]));
    assert_eq!(v["groups"], json!([[0, 2, 4, 6], [1, 3, 5, 7]]));
    assert_eq!(v["representatives"], json!([0, 1]));
    assert_eq!(
        v["transpose"],
        json!({"replicas": 8, "stride": 1, "group_size": 2})
    );
    assert_eq!(v["comm_group"], "orthogonal:4");
    assert_eq!(v["returning"], 8);
    assert_eq!(v["host_shape"], json!([2, 2, 3]));
    assert_eq!(v["returned_shape"], json!([8, 2, 3]));
}

#[test]
fn non_comm_grouping_and_missing_transpose_are_null() {
    let v = json_of(&["--replicas", "12", "--grouping", "3:2"]);
    assert_eq!(v["comm_group"], Value::Null);
    assert_eq!(v["transpose"], Value::Null);
}

#[test]
fn sharded_layout_on_the_second_instance() {
    let v = json_of(&[
        "--replicas",
        "4",
        "--shape",
        "30",
        "--shard-domain",
        "4",
        "--instances",
        "2",
        "--instance",
        "1",
    ]);
    assert_eq!(
        v["shard"],
        json!({"domain": 4, "per_replica": 8, "gathered_elements": 32,
               "intervals": [[0, 7], [8, 16], [16, 23], [24, 32]]})
    );
    assert_eq!(
        v["placement"],
        json!([{"replica": 2, "row": 0, "pieces": [[15, 22, 0]]},
               {"replica": 3, "row": 0, "pieces": [[22, 30, 0]]}])
    );
    assert_eq!(v["collective"], "sum-allreduce");
}

#[test]
fn padded_tail_and_allgather() {
    let v = json_of(&[
        "--replicas",
        "4",
        "--shape",
        "30",
        "--shard-domain",
        "4",
        "--layout",
        "padded-tail",
    ]);
    assert_eq!(
        v["shard"]["intervals"],
        json!([[0, 8], [8, 16], [16, 24], [24, 30]])
    );
    let v = json_of(&[
        "--replicas",
        "4",
        "--comm",
        "none",
        "--retrieval",
        "all-replicas",
        "--instances",
        "2",
    ]);
    assert_eq!(v["collective"], "allgather");
}

#[test]
fn table_and_svg_describe_the_same_layout() {
    let svg = std::env::temp_dir().join(format!("tessera-layout-{}.svg", std::process::id()));
    let out = tessera(&[
        "--replicas",
        "8",
        "--comm",
        "orthogonal:4",
        "--shape",
        "30",
        "--shard-domain",
        "2",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("orthogonal:4"), "{table}");
    assert!(table.contains("[15, 30) -> 0"), "{table}");
    let picture = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).ok();
    assert!(picture.starts_with("<svg") && picture.trim_end().ends_with("</svg>"));
    assert_eq!(
        picture.matches(">replica ").count(),
        8,
        "one box per replica"
    );
    assert!(picture.contains("elements [15, 30) at 0"));
}

#[test]
fn invalid_input_names_the_rule() {
    assert!(error_of(&["--replicas", "8", "--comm", "consecutive:3"])
        .contains("divide the number of replicas (8)"));
    assert!(error_of(&["--replicas", "4", "--grouping", "3:1"]).contains("divisible"));
    assert!(error_of(&["--replicas", "0"]).contains("1..=4096"));
    assert!(
        error_of(&["--replicas", "8", "--shape", "5", "--shard-domain", "3"])
            .contains("shard domain (3) must divide the group size (8)")
    );
    assert!(error_of(&["--replicas", "8", "--instances", "3"]).contains("--instances"));
    assert!(error_of(&["--replicas", "8", "--instance", "1"]).contains("--instance"));
    assert!(error_of(&["--replicas", "8", "--comm", "bogus"]).contains("--comm"));
    assert!(error_of(&["--replicas", "8", "--layout", "padded-tail"]).contains("--shard-domain"));
    assert!(
        error_of(&["--replicas", "8", "--grouping", "1:8", "--comm", "all"])
            .contains("cannot be used with")
    );
    assert!(
        error_of(&["--replicas", "8", "--shape", "1,1,1,1,1,1,1,1,1"]).contains("maximum rank")
    );
    // Rank 8 fits one replica, but several groups add a ninth, host dimension.
    json_of(&["--replicas", "8", "--shape", "1,1,1,1,1,1,1,1"]);
    assert!(error_of(&[
        "--replicas",
        "8",
        "--comm",
        "none",
        "--shape",
        "1,1,1,1,1,1,1,1"
    ])
    .contains("maximum rank"));
}
