//! The `adevents` binary itself: subcommands, environment variables, exit codes, start-up log
//! and graceful shutdown on signals.

use crate::common::process::{ServerProcess, adevents, run_to_end};
use crate::common::{
    cassandra_nodes, first_node_address, http, migrated_store, private_keyspace, proxy::TcpProxy,
    shared_keyspace,
};
use reqwest::StatusCode;
use std::time::Duration;

#[tokio::test]
async fn migrate_applies_pending_files_then_is_a_no_op() {
    let keyspace = private_keyspace("cli");
    let nodes = cassandra_nodes().join(",");
    let args = [
        "migrate",
        "--store",
        "cassandra",
        "--keyspace",
        keyspace.as_str(),
        "--cassandra-nodes",
        &nodes,
    ];

    let (first, first_output) = run_to_end(adevents(&args, &[])).await;
    let (second, second_output) = run_to_end(adevents(&args, &[])).await;

    assert!(first.success(), "{first_output}");
    assert!(first_output.contains("0001_events.cql"), "{first_output}");
    assert!(
        first_output.contains("migrations applied"),
        "{first_output}"
    );
    assert!(second.success(), "{second_output}");
    assert!(
        second_output.contains("no migration to apply"),
        "{second_output}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_fails_start_up_with_a_clear_error() {
    let args = [
        "serve",
        "--store",
        "cassandra",
        "--listen",
        "127.0.0.1:0",
        "--cassandra-nodes",
        "127.0.0.1:1",
    ];

    let (status, output) = run_to_end(adevents(&args, &[])).await;

    assert!(!status.success());
    assert!(
        output.contains("cannot connect to Cassandra at 127.0.0.1:1"),
        "{output}"
    );
}

#[tokio::test]
async fn with_no_subcommand_it_serves_configured_from_the_environment_and_stops_on_ctrl_c() {
    migrated_store().await;
    let nodes = cassandra_nodes().join(",");
    let keyspace = shared_keyspace();
    let env = [
        ("ADEVENTS_LISTEN", "127.0.0.1:0"),
        ("ADEVENTS_STORE", "cassandra"),
        ("ADEVENTS_CASSANDRA_NODES", nodes.as_str()),
        ("ADEVENTS_KEYSPACE", keyspace.as_str()),
        ("ADEVENTS_NO_MIGRATE", "true"),
    ];
    let mut server = ServerProcess::start(adevents(&[], &env)).await;

    // Ready once it has checked for processes that went away (docs/API.md, "Operations"),
    // and it says so with its address, as it said it was listening.
    let ready = server.wait_ready().await;
    let announced = crate::common::eventually(Duration::from_secs(5), || async {
        server
            .output()
            .lines()
            .any(|line| line.contains("\"ready\"") && line.contains(&server.address().to_string()))
    })
    .await;
    server.send_signal("INT");
    let status = server.wait(Duration::from_secs(30)).await;

    assert!(ready, "{}", server.output());
    assert!(announced, "{}", server.output());
    assert!(status.success(), "exit {status:?}\n{}", server.output());
    assert!(
        server.output().contains("--no-migrate"),
        "{}",
        server.output()
    );
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish_before_exiting() {
    migrated_store().await;
    // Requests to Cassandra take over a second through this proxy, so one is surely in
    // flight when the signal arrives.
    let proxy = TcpProxy::start(first_node_address()).await;
    let proxy_address = proxy.address.to_string();
    let keyspace = shared_keyspace();
    let args = [
        "serve",
        "--store",
        "cassandra",
        "--listen",
        "127.0.0.1:0",
        "--cassandra-nodes",
        proxy_address.as_str(),
        "--keyspace",
        keyspace.as_str(),
    ];
    let mut server = ServerProcess::start(adevents(&args, &[])).await;
    // Once ready (its start-up repair done), `/readyz` asks the store.
    let ready = server.wait_ready().await;
    assert!(ready, "{}", server.output());
    proxy.delay_requests(Duration::from_millis(1200));

    let in_flight = tokio::spawn(http().get(server.url("/readyz")).send());
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.send_signal("TERM");
    let response = in_flight
        .await
        .expect("request task")
        .expect("answered, not dropped");
    // The latency was there to keep that request in flight. What the process stores as it
    // stops (its sketches, delivery windows and place in the list of processes, a few round
    // trips each, more after it repaired a process that went away) runs at the node's speed,
    // or 1.2 s a round trip could outlast the wait below on a busy machine.
    proxy.delay_requests(Duration::ZERO);
    let status = server.wait(Duration::from_secs(30)).await;

    assert_eq!(response.status(), StatusCode::OK, "{}", server.output());
    assert!(status.success(), "exit {status:?}\n{}", server.output());
    let output = server.output();
    assert!(output.contains("received SIGTERM"), "{output}");
    assert!(output.contains("\"stopped\""), "{output}");
}
