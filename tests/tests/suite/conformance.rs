//! PopART's grouping, comm-group and variable-settings cases (copied into `tests/data/`
//! from the design notes' conformance set), checked against `tessera-core`.

use serde_json::Value;
use tessera_core::grouping::{
    CommGroup, GroupingSpec, ReplicaGrouping, RetrievalMode, Shape, VariableSettings,
};

const GROUPING: &str = include_str!("../../data/grouping.json");
const VARIABLES: &str = include_str!("../../data/variables.json");

fn cases(text: &str, key: &str) -> Vec<Value> {
    let doc: Value = serde_json::from_str(text).expect("conformance file is JSON");
    doc[key].as_array().expect("case list").clone()
}

fn num(v: &Value) -> usize {
    v.as_u64().expect("a whole number") as usize
}

fn nums(v: &Value) -> Vec<usize> {
    v.as_array().expect("a list").iter().map(num).collect()
}

fn nested(v: &Value) -> Vec<Vec<usize>> {
    v.as_array().expect("a list").iter().map(nums).collect()
}

fn triple(v: &Value) -> (usize, usize, usize) {
    (
        num(&v["replicas"]),
        num(&v["stride"]),
        num(&v["group_size"]),
    )
}

fn stored(g: &ReplicaGrouping) -> (usize, usize, usize) {
    (g.replicas(), g.stride(), g.group_size())
}

fn groups_of(g: &ReplicaGrouping) -> Vec<Vec<usize>> {
    (0..g.num_groups())
        .map(|x| g.members(x).unwrap().collect())
        .collect()
}

fn shape(key: &str) -> Shape {
    let dims: Vec<usize> = serde_json::from_str(key).expect("a shape key like [4,2]");
    Shape::new(&dims).unwrap()
}

#[test]
fn replica_grouping_cases() {
    let all = cases(GROUPING, "cases");
    assert!(all.len() >= 30, "the conformance file lost cases");
    for case in all {
        let (n, s, k) = triple(&case["grouping"]);
        let built = ReplicaGrouping::new(n, s, k);
        let context = format!("grouping ({n}, {s}, {k})");
        if let Some(mention) = case["error_mentions"].as_str() {
            let message = built.expect_err(&context).to_string().to_lowercase();
            assert!(
                message.contains(mention),
                "{context}: '{message}' lacks '{mention}'"
            );
            continue;
        }
        let g = built.unwrap_or_else(|e| panic!("{context}: {e}"));
        if !case["stored"].is_null() {
            assert_eq!(
                stored(&g),
                triple(&case["stored"]),
                "{context}: stored form"
            );
        }
        if !case["num_groups"].is_null() {
            assert_eq!(
                g.num_groups(),
                num(&case["num_groups"]),
                "{context}: num_groups"
            );
        }
        if !case["assignment"].is_null() {
            assert_eq!(
                g.assignment().collect::<Vec<_>>(),
                nums(&case["assignment"]),
                "{context}"
            );
        }
        if !case["groups"].is_null() {
            assert_eq!(groups_of(&g), nested(&case["groups"]), "{context}: groups");
        }
        if !case["index_in_group"].is_null() {
            let index: Vec<usize> = (0..n).map(|r| g.index_in_group(r).unwrap()).collect();
            assert_eq!(
                index,
                nums(&case["index_in_group"]),
                "{context}: index_in_group"
            );
        }
        if !case["transpose"].is_null() {
            let t = g.transpose().unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(
                stored(&t),
                triple(&case["transpose"]),
                "{context}: transpose"
            );
        }
        if case["transpose_error"].as_bool() == Some(true) {
            assert!(g.transpose().is_err(), "{context}: transpose must fail");
        }
        if let Some(text) = case["text"].as_str() {
            assert_eq!(g.to_string(), text);
        }
        if !case["group_of_out_of_range"].is_null() {
            let message = g
                .group_of(num(&case["group_of_out_of_range"]))
                .unwrap_err()
                .to_string();
            let expected = case["error_text"].as_str().unwrap().trim_end_matches('.');
            assert!(
                message.starts_with(expected),
                "'{message}' must start with '{expected}'"
            );
        }
    }
}

#[test]
fn comm_group_cases() {
    let all = cases(VARIABLES, "comm_groups");
    assert!(all.len() >= 15, "the conformance file lost cases");
    for case in all {
        if case["comm_group_error"].as_bool() == Some(true) {
            let (n, s, k) = triple(&case["grouping"]);
            let g = ReplicaGrouping::new(n, s, k).unwrap();
            assert!(
                CommGroup::from_grouping(&g).is_err(),
                "{g} must not be a comm group"
            );
            continue;
        }
        let comm: CommGroup = case["comm_group"].as_str().unwrap().parse().unwrap();
        if case["replicas"].is_null() {
            // grouping → comm group
            let (n, s, k) = triple(&case["grouping"]);
            let g = ReplicaGrouping::new(n, s, k).unwrap();
            assert_eq!(CommGroup::from_grouping(&g), Ok(comm), "{g}");
            continue;
        }
        // comm group → grouping (and back)
        let g = comm.to_grouping(num(&case["replicas"])).unwrap();
        if !case["grouping"].is_null() {
            assert_eq!(stored(&g), triple(&case["grouping"]), "{comm}");
        }
        if !case["groups"].is_null() {
            assert_eq!(groups_of(&g), nested(&case["groups"]), "{comm}");
        }
        assert_eq!(CommGroup::from_grouping(&g), Ok(comm), "{comm} round trip");
    }
}

#[test]
fn variable_settings_cases() {
    let all = cases(VARIABLES, "variable_settings");
    assert!(all.len() >= 6, "the conformance file lost cases");
    for case in all {
        let spec = match case["comm_group"].as_str() {
            Some(comm) => GroupingSpec::Comm(comm.parse().unwrap()),
            None => GroupingSpec::Strided {
                stride: num(&case["stride"]),
                group_size: num(&case["group_size"]),
            },
        };
        let retrieval = match case["retrieval"].as_str() {
            Some("all-replicas") => RetrievalMode::AllReplicas,
            _ => RetrievalMode::OnePerGroup,
        };
        let n = num(&case["replicas"]);
        let vs = VariableSettings::new(spec, retrieval, n).unwrap();
        let context = format!("{spec:?} on {n}");
        if !case["returning"].is_null() {
            assert_eq!(
                vs.returning(),
                num(&case["returning"]),
                "{context}: returning"
            );
        }
        if !case["group_count"].is_null() {
            assert_eq!(
                vs.group_count(),
                num(&case["group_count"]),
                "{context}: group count"
            );
        }
        if !case["groups"].is_null() {
            assert_eq!(
                groups_of(vs.grouping()),
                nested(&case["groups"]),
                "{context}"
            );
        }
        if !case["representative_of_group_2"].is_null() {
            assert_eq!(
                vs.representative(2),
                Ok(num(&case["representative_of_group_2"]))
            );
        }
        for (from, to) in case["host_shape"].as_object().into_iter().flatten() {
            assert_eq!(
                vs.host_shape(&shape(from)).unwrap().dims(),
                nums(to),
                "{context}: host {from}"
            );
        }
        for (from, to) in case["replica_shape"].as_object().into_iter().flatten() {
            assert_eq!(
                vs.replica_shape(&shape(from)).unwrap().dims(),
                nums(to),
                "{context}: replica {from}"
            );
        }
        for bad in case["replica_shape_errors"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(
                vs.replica_shape(&shape(bad.as_str().unwrap())).is_err(),
                "{context}: {bad}"
            );
        }
        for (mode, to) in case["returned_shape"].as_object().into_iter().flatten() {
            let retrieval = if mode == "all-replicas" {
                RetrievalMode::AllReplicas
            } else {
                RetrievalMode::OnePerGroup
            };
            let vs = VariableSettings::from_grouping(*vs.grouping(), retrieval);
            let s = Shape::new(&nums(&case["shape"])).unwrap();
            assert_eq!(
                vs.returned_shape(&s).unwrap().dims(),
                nums(to),
                "{context}: {mode}"
            );
        }
    }
}
