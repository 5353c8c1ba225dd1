//! Readiness follows the store: when the server loses Cassandra it says so, and when
//! Cassandra comes back the same process is ready again with no restart.

use crate::common::{
    TestServer, config, eventually, first_node_address, http, migrated_store, proxy::TcpProxy,
    shared_keyspace, store_for,
};
use reqwest::StatusCode;
use std::time::Duration;

#[tokio::test]
async fn readyz_is_503_while_cassandra_is_unreachable_and_200_again_once_it_is_back() {
    migrated_store().await;
    let proxy = TcpProxy::start(first_node_address()).await;
    let mut through_proxy = config(shared_keyspace());
    through_proxy.nodes = vec![proxy.address.to_string()];
    let server =
        TestServer::start(std::sync::Arc::new(store_for(through_proxy, false).await)).await;
    let client = http();
    let status = |path: &'static str| {
        let client = client.clone();
        let url = server.url(path);
        async move {
            client
                .get(url)
                .send()
                .await
                .expect("server answers")
                .status()
        }
    };
    assert_eq!(status("/readyz").await, StatusCode::OK);

    proxy.cut();
    let went_unready = eventually(Duration::from_secs(30), || async {
        status("/readyz").await == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    assert!(went_unready, "/readyz still 200 with Cassandra cut off");
    assert_eq!(
        status("/healthz").await,
        StatusCode::OK,
        "liveness is not readiness"
    );

    proxy.restore();
    let came_back = eventually(Duration::from_secs(90), || async {
        status("/readyz").await == StatusCode::OK
    })
    .await;
    assert!(
        came_back,
        "/readyz did not recover after Cassandra came back"
    );
}
