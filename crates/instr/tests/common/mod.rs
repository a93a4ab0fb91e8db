//! Helpers shared by the instr integration tests.

/// The (id, name, calls) of each function in a tracer profile
/// (`MANTLE_INSTR_OUT`, schema `mantle-instr-profile/1`).
pub fn profile_json(text: &str) -> Vec<(u32, String, u64)> {
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_u64().unwrap() as u32,
                f["name"].as_str().unwrap().to_string(),
                f["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}
