//! The first admin key, as an operator meets it: the embedded store's bootstrap key file, and
//! Cassandra's `adevents keys create-admin`.

use crate::common::process::{ServerProcess, adevents, embedded_server, run_to_end};
use crate::common::{anonymous_http, cassandra_nodes, private_keyspace};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

async fn own_fields(server: &ServerProcess, key: &str) -> (StatusCode, Value) {
    let response = anonymous_http()
        .get(server.url("/v1/keys/self"))
        .bearer_auth(key)
        .send()
        .await
        .expect("answered");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn serve_embedded(folder: &str, env: &[(&str, &str)]) -> ServerProcess {
    ServerProcess::start(embedded_server(folder, &[], env)).await
}

async fn stop(mut server: ServerProcess) {
    server.send_signal("TERM");
    assert!(server.wait(Duration::from_secs(30)).await.success());
}

#[tokio::test]
async fn the_embedded_store_makes_its_admin_key_once_per_folder() {
    let folder = tempfile::tempdir().expect("temp dir");
    let path = folder.path().to_str().expect("UTF-8 path");
    let key_file = folder.path().join("admin.key");
    let no_operator_key = [("ADEVENTS_ADMIN_KEY", "")];

    let server = serve_embedded(path, &no_operator_key).await;
    let key = std::fs::read_to_string(&key_file).expect("admin.key written at the first start");
    let key = key.trim().to_owned();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "readable by its owner only");
    }
    let (status, own) = own_fields(&server, &key).await;
    assert_eq!(status, StatusCode::OK, "{own}");
    assert_eq!(own["scope"], "admin");
    assert!(
        !server.output().contains(&key),
        "the secret is never logged"
    );
    stop(server).await;

    let server = serve_embedded(path, &no_operator_key).await;
    let again = std::fs::read_to_string(&key_file).expect("kept");
    assert_eq!(again.trim(), key, "a second start keeps the first key");
    let (status, _) = own_fields(&server, &key).await;
    assert_eq!(status, StatusCode::OK);
    // Revoked, it is not made again: the folder had its bootstrap key.
    let id = own["id"].as_str().expect("id").to_owned();
    let revoked = anonymous_http()
        .delete(server.url(&format!("/v1/keys/{id}")))
        .bearer_auth(&key)
        .send()
        .await
        .expect("answered");
    assert_eq!(revoked.status(), StatusCode::NO_CONTENT);
    stop(server).await;
    let server = serve_embedded(path, &no_operator_key).await;
    let after = std::fs::read_to_string(&key_file).expect("still there");
    assert_eq!(after.trim(), key, "no new key once the folder had one");
    let (status, _) = own_fields(&server, &key).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    stop(server).await;

    let operated = tempfile::tempdir().expect("temp dir");
    let server = serve_embedded(operated.path().to_str().expect("UTF-8"), &[]).await;
    assert!(
        !operated.path().join("admin.key").exists(),
        "with ADEVENTS_ADMIN_KEY set no file is written"
    );
    stop(server).await;
}

#[tokio::test]
async fn cassandra_serves_with_keys_only_once_an_admin_key_exists() {
    let keyspace = private_keyspace("keys");
    let nodes = cassandra_nodes().join(",");
    let store = [
        "--store",
        "cassandra",
        "--cassandra-nodes",
        &nodes,
        "--keyspace",
        keyspace.as_str(),
    ];
    let no_operator_key = [("ADEVENTS_ADMIN_KEY", "")];
    let mut serve_args = vec!["serve", "--listen", "127.0.0.1:0"];
    serve_args.extend(store);

    let (status, output) = run_to_end(adevents(&serve_args, &no_operator_key)).await;
    assert!(!status.success(), "refused without an admin key: {output}");
    assert!(output.contains("keys create-admin"), "{output}");

    let mut create = vec!["keys"];
    create.extend(store);
    create.push("create-admin");
    let output = adevents(&create, &no_operator_key)
        .output()
        .await
        .expect("run keys create-admin");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let key = stdout.trim().to_owned();
    assert!(key.starts_with("adk_"), "the key alone on stdout: {stdout}");
    assert!(!stderr.contains(&key), "never in the logs");

    let server = ServerProcess::start(adevents(&serve_args, &no_operator_key)).await;
    let (status, own) = own_fields(&server, &key).await;
    assert_eq!(status, StatusCode::OK, "{own}");
    assert_eq!(own["scope"], "admin");
    stop(server).await;
}
