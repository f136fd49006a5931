//! The internal network helper against the real engine: racing callers get one network, it
//! is internal, and its gateway lies inside its subnet.

use std::collections::HashMap;
use std::net::IpAddr;

use nexbot_docker::{ensure_internal_network, remove_network};
use nexbot_tests::docker_or_skip;

#[tokio::test]
async fn racing_ensures_share_one_internal_network() {
    let Some(docker) = docker_or_skip("pool_network").await else {
        return;
    };
    let name = format!("nxp-net-{}", std::process::id());
    let labels = HashMap::from([("nexbot.test".to_owned(), "nxp".to_owned())]);
    let (a, b, c) = tokio::join!(
        ensure_internal_network(&docker, &name, &labels),
        ensure_internal_network(&docker, &name, &labels),
        ensure_internal_network(&docker, &name, &labels),
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!(a.id, b.id);
    assert_eq!(b.id, c.id);
    assert_eq!([a.created, b.created, c.created].iter().filter(|x| **x).count(), 1);
    let inspected = docker.inspect_network(&a.id, None).await.unwrap();
    assert_eq!(inspected.internal, Some(true));
    assert_eq!(inspected.labels.unwrap()["nexbot.test"], "nxp");
    let (net, bits) = a.subnet.split_once('/').unwrap();
    let (IpAddr::V4(net), IpAddr::V4(gw)) = (net.parse::<IpAddr>().unwrap(), a.gateway) else {
        panic!("expected IPv4: {a:?}");
    };
    let mask = u32::MAX << (32 - bits.parse::<u32>().unwrap());
    assert_eq!(u32::from(net) & mask, u32::from(gw) & mask, "{a:?}");

    remove_network(&docker, &name).await.unwrap();
    let again = ensure_internal_network(&docker, &name, &labels).await.unwrap();
    assert!(again.created);
    remove_network(&docker, &name).await.unwrap();
}
