//! The shipped manifests (`deploy/kubernetes/`) against the real cluster: the Role the servers'
//! account gets is all the runtime needs (it starts, reaches, runs commands in and stops a pod
//! with that account's token only) and no more than its namespace's pods (no secrets, nothing
//! in another namespace); the servers' own manifests are accepted by the API server.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use tandem_host::runtime::kubernetes::{KubernetesRuntime, Settings};
use tandem_host::runtime::{Keep, Runtime};

use super::{OwnNamespace, cluster, health, image, sh, spec, wid};

const RBAC: &str = include_str!("../../../deploy/kubernetes/rbac.yaml");
const SERVERS: &str = include_str!("../../../deploy/kubernetes/tandem.yaml");

/// The manifest's objects, every namespaced one (and every reference to a namespace) moved to
/// `namespace`; the Namespace objects themselves left out.
fn objects(yaml: &str, namespace: &str) -> Vec<serde_json::Value> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_str_multiple(yaml).unwrap();
    docs.into_iter()
        .filter(|d| d["kind"] != "Namespace")
        .map(|mut d| {
            d["metadata"]["namespace"] = namespace.into();
            if let Some(subjects) = d["subjects"].as_array_mut() {
                for s in subjects {
                    s["namespace"] = namespace.into();
                }
            }
            d
        })
        .collect()
}

/// Creates `object` (a dry run: the API server checks it and keeps nothing).
async fn create(client: &kube::Client, object: &serde_json::Value, dry_run: bool) {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (
            String::new(),
            object["apiVersion"].as_str().unwrap().to_string(),
        ),
    };
    let kind = object["kind"].as_str().unwrap();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, kind));
    let namespace = object["metadata"]["namespace"].as_str().unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let parsed: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    let params = PostParams {
        dry_run,
        ..PostParams::default()
    };
    if let Err(e) = api.create(&params, &parsed).await {
        panic!(
            "the API server refused {kind} {}: {e}",
            object["metadata"]["name"]
        );
    }
}

#[tokio::test]
async fn the_shipped_role_is_what_the_runtime_needs_and_no_more_and_the_servers_manifests_are_accepted()
 {
    let Some((kubeconfig, registry)) = cluster() else {
        return;
    };
    let image = image(&registry).await;
    let admin = KubernetesRuntime::client(Some(&kubeconfig)).await.unwrap();
    let ns = OwnNamespace::new(&admin, &kubeconfig).await;
    let rbac = objects(RBAC, &ns.name);
    assert_eq!(
        rbac.iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ServiceAccount", "Role", "RoleBinding"]
    );
    for object in &rbac {
        create(&admin, object, false).await;
    }

    // The servers' account, by its token alone.
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns.name);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("tandem", &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let mut file = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    for user in &mut file.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        });
    }
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();

    // Everything the runtime does, with those rights only: the isolation policy made and then
    // brought up to date, a pod started, listed, reached, commanded and stopped.
    let settings = Settings {
        namespace: ns.name.clone(),
        installation: "it".into(),
        start_timeout: std::time::Duration::from_secs(120),
        root_on_node: true,
        ..Settings::default()
    };
    KubernetesRuntime::new(client.clone(), settings.clone())
        .await
        .expect("the Role lets the runtime make its isolation policy");
    let rt = KubernetesRuntime::new(client.clone(), settings)
        .await
        .expect("and update it");
    let id = wid();
    let token = "rights-token";
    let ws = rt
        .start(spec(&id, &image, token))
        .await
        .expect("the Role lets the runtime start a pod");
    assert_eq!(rt.list().await.unwrap(), std::slice::from_ref(&id));
    let out = sh(&rt, &id, "echo ran").await;
    assert_eq!(out.stdout, "ran\n", "exec: {out:?}");
    let stream = rt
        .connect_agent(&id, ws.instance)
        .await
        .expect("the Role lets the runtime reach the agent");
    assert!(
        health(stream, Some(token))
            .await
            .starts_with("HTTP/1.1 200")
    );
    rt.stop(&id, Keep::Nothing)
        .await
        .expect("the Role lets the runtime delete the pod");
    assert!(rt.list().await.unwrap().is_empty());

    // And nothing more: not the namespace's secrets, not another namespace's pods.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns.name);
    let refused = secrets.list(&Default::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );
    let elsewhere: Api<Pod> = Api::namespaced(client.clone(), "default");
    let refused = elsewhere.list(&Default::default()).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );

    // The servers' manifests, checked by the API server (kept nowhere).
    let servers = objects(SERVERS, &ns.name);
    assert_eq!(
        servers
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ConfigMap", "Service", "Service", "StatefulSet"]
    );
    for object in &servers {
        create(&admin, object, true).await;
    }
}
