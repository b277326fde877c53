//! The data of a Kubernetes Secret as the API serves it (base64 in `data`).

/// A Secret's `data.<key>` (base64) as UTF-8 text.
pub fn secret_data(secret: &serde_json::Value, key: &str) -> Option<String> {
    use base64::Engine;
    let encoded = secret.get("data")?.get(key)?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}
