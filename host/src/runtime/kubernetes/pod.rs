//! The Pod a workspace runs as: its image, its first process behind dumb-init, its limits as
//! requests and limits, and the confinement a cluster gives (seccomp `RuntimeDefault`, no
//! privilege escalation, the capabilities a local workspace has less `NET_RAW` and `MKNOD`, no
//! service-account token, no service links). Pure: built from the spec and the runtime's
//! settings, so its tests need no cluster.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::Settings;
use crate::runtime::WorkspaceSpec;
use crate::{Error, Result};

/// The label every workspace pod carries, with [`MANAGED_BY`].
/// A workspace pod requests its CPU limit divided by this, and its memory limit divided by
/// [`REQUEST_MEMORY_SHARE`] (limits are what it may use; requests what the node reserves).
pub const REQUEST_CPU_SHARE: i64 = 4;
pub const REQUEST_MEMORY_SHARE: i64 = 2;

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "tandem";
/// The label naming the installation (the server group) whose workspace it is.
pub const INSTALLATION_LABEL: &str = "tandem.dev/installation";
/// The label naming the pod's part: `workspace` for every workspace pod.
pub const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
pub const WORKSPACE: &str = "workspace";
/// The container's name.
use crate::runtime::spec::{INIT, INIT_ARGS};

pub const CONTAINER: &str = "workspace";
/// The init container that takes the pod's network away ([`build`]).
pub const ISOLATE_CONTAINER: &str = "isolate-network";
/// Where the workspace agent listens inside the pod: its own loopback, which only the API
/// server's port-forward (entering the pod's network namespace through its node) reaches.
pub const AGENT_LISTEN: &str = "127.0.0.1:7311";
pub const AGENT_PORT: u16 = 7311;
/// The capabilities a workspace's processes keep: the container default less `NET_RAW` (no
/// raw sockets to spoof from) and `MKNOD`.
pub const CAPABILITIES: [&str; 12] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// A Kubernetes name (DNS-1123 label): what a workspace id must be to name a pod.
pub fn check_name(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 63
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !id.starts_with('-')
        && !id.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "workspace id {id:?} cannot name a pod: 1–63 lowercase letters, digits or '-', not at either end"
        )))
    }
}

/// The Pod of workspace `want` under `settings`.
pub fn build(want: &WorkspaceSpec, settings: &Settings) -> Result<Pod> {
    check_name(&want.id)?;
    let Some(image) = want.files.image.clone() else {
        return Err(Error::Invalid(format!(
            "workspace {} names no image: a cluster starts workspaces from images in a registry, not from this machine's layers",
            want.id
        )));
    };
    if !want.files.binds.is_empty() {
        return Err(Error::Invalid(format!(
            "workspace {} binds this machine's files, which a pod cannot see",
            want.id
        )));
    }
    // The image's init (reaps zombies, forwards signals): images pushed before dumb-init
    // (kept workspaces, older snapshots) have tini instead. `exec` keeps PID 1.
    let mut command: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "if [ -x {INIT} ]; then exec {INIT} {} \"$@\"; fi; exec /usr/bin/tini -s -- \"$@\"",
            INIT_ARGS.join(" ")
        ),
        "sh".into(),
    ];
    command.extend(want.init.iter().cloned());
    let mut env: Vec<Value> = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("TERM", "xterm-256color"),
        ("HOME", "/root"),
        ("LANG", "C.UTF-8"),
        (tandem_protocol::agent::LISTEN_ENV, AGENT_LISTEN),
        // The gateway comes over bridges through the agent (no socket can be bound in).
        (tandem_protocol::agent::GATEWAY_BRIDGE_ENV, "1"),
    ]
    .iter()
    .map(|(k, v)| json!({ "name": k, "value": v }))
    .collect();
    if want.egress.is_some() {
        // Egress by the allow-list goes through the server's proxy, which the agent listens
        // for on the pod's loopback (the pod itself has no network).
        let proxy = format!(
            "http://127.0.0.1:{}",
            tandem_protocol::agent::EGRESS_PROXY_PORT
        );
        env.push(json!({ "name": tandem_protocol::agent::EGRESS_PROXY_ENV, "value": "1" }));
        for k in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
            env.push(json!({ "name": k, "value": proxy }));
        }
        for k in ["NO_PROXY", "no_proxy"] {
            env.push(json!({ "name": k, "value": "localhost,127.0.0.1,::1" }));
        }
    }
    env.extend(
        want.env
            .iter()
            .map(|(k, v)| json!({ "name": k, "value": v })),
    );
    let limits = &want.limits;
    let millicores = (limits.cpus * 1000.0).round().max(1.0) as i64;
    let resources = json!({
        "cpu": format!("{millicores}m"),
        "memory": limits.memory_bytes.to_string(),
        "ephemeral-storage": limits.disk_bytes.to_string(),
    });
    // What the scheduler reserves: a workspace is idle most of its life (waiting on the model
    // or a person), so a quarter of its CPU and half its memory; its disk whole (a pod past
    // its ephemeral-storage request may be evicted first).
    let requests = json!({
        "cpu": format!("{}m", (millicores / REQUEST_CPU_SHARE).max(1)),
        "memory": (limits.memory_bytes / REQUEST_MEMORY_SHARE).to_string(),
        "ephemeral-storage": limits.disk_bytes.to_string(),
    });
    let mut spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "hostname": want.hostname,
        "terminationGracePeriodSeconds": 1,
        // No cluster DNS: a workspace reaches nothing by name unless its allow-list says so.
        "dnsPolicy": "None",
        "dnsConfig": { "nameservers": ["127.0.0.1"] },
        "securityContext": {
            "seccompProfile": { "type": "RuntimeDefault" },
        },
        "containers": [{
            "name": CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": command,
            "env": env,
            "workingDir": "/",
            "resources": { "requests": requests, "limits": resources },
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "privileged": false,
                "capabilities": { "drop": ["ALL"], "add": CAPABILITIES },
            },
            "volumeMounts": [{ "name": "tmp", "mountPath": "/tmp" }],
        }],
        // A private /tmp that does not live in the writable layer, as on this machine; it
        // counts against the pod's ephemeral storage.
        "volumes": [{ "name": "tmp", "emptyDir": { "sizeLimit": "1Gi" } }],
    });
    if settings.isolate_links {
        // Before the workspace: every interface but loopback down, by the one container that
        // may (the workspace's own has no CAP_NET_ADMIN to bring one up again). No network,
        // whatever the cluster's network plugin enforces. An image pushed by a version before
        // this one has an agent without `isolate-network` (it answers with its usage): such a
        // pod starts with its links (only the NetworkPolicy holds), so its session is not lost.
        let agent = tandem_protocol::agent::BINARY;
        spec["initContainers"] = json!([{
            "name": ISOLATE_CONTAINER,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/bin/sh", "-c", format!(
                "out=$({agent} isolate-network 2>&1); rc=$?; echo \"$out\"; [ $rc = 0 ] && exit 0; \
                 case \"$out\" in *usage:*) echo 'an agent from before isolate-network: links left up'; exit 0;; esac; exit $rc"
            )],
            "resources": { "requests": requests, "limits": resources },
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "privileged": false,
                "capabilities": { "drop": ["ALL"], "add": ["NET_ADMIN"] },
            },
        }]);
    }
    if let Some(class) = &settings.runtime_class {
        spec["runtimeClassName"] = json!(class);
    }
    if settings.user_namespaces {
        spec["hostUsers"] = json!(false);
    }
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": want.id,
            "namespace": settings.namespace,
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                COMPONENT_LABEL: WORKSPACE,
                INSTALLATION_LABEL: settings.installation,
            },
        },
        "spec": spec,
    });
    if let Some(egress) = &want.egress {
        // What the proxy lets it reach, for a restarted server to take it back ([`egress`]).
        let rules = serde_json::to_string(egress)
            .map_err(|e| Error::Internal(format!("the pod's egress: {e}")))?;
        pod["metadata"]["annotations"] = json!({ EGRESS_ANNOTATION: rules });
    }
    serde_json::from_value(pod).map_err(|e| Error::Internal(format!("building the pod: {e}")))
}

/// The annotation that holds a pod's egress allow-list (written by the server only: a pod has
/// no rights on the cluster's API).
pub const EGRESS_ANNOTATION: &str = "tandem.dev/egress";

/// The egress allow-list pod `pod` was started with, if any.
pub fn egress(pod: &Pod) -> Option<crate::runtime::network::Egress> {
    let rules = pod.metadata.annotations.as_ref()?.get(EGRESS_ANNOTATION)?;
    serde_json::from_str(rules).ok()
}

/// The name of the installation's isolation policy, which owns its pods.
pub fn isolation_name(settings: &Settings) -> String {
    format!("tandem-workspaces-{}", settings.installation)
}

/// The NetworkPolicy that gives the installation's workspace pods no network: no ingress
/// (their agent listens on their own loopback anyway) and no egress (what they may reach goes
/// through the server's gateway, over the connection the server opened).
pub fn isolation(settings: &Settings) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": isolation_name(settings),
            "namespace": settings.namespace,
            "labels": { MANAGED_BY_LABEL: MANAGED_BY, INSTALLATION_LABEL: settings.installation },
        },
        "spec": {
            "podSelector": { "matchLabels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                COMPONENT_LABEL: WORKSPACE,
                INSTALLATION_LABEL: settings.installation,
            } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    })
}

/// The label selector of the installation's workspace pods.
pub fn selector(settings: &Settings) -> String {
    format!(
        "{MANAGED_BY_LABEL}={MANAGED_BY},{COMPONENT_LABEL}={WORKSPACE},{INSTALLATION_LABEL}={}",
        settings.installation
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::oci::Files;
    use crate::runtime::{Limits, WorkspaceSpec};

    fn settings() -> Settings {
        Settings {
            namespace: "tandem".into(),
            installation: "abc123".into(),
            runtime_class: None,
            user_namespaces: false,
            ..Settings::default()
        }
    }

    fn spec(files: Files) -> WorkspaceSpec {
        WorkspaceSpec {
            id: "s-0123456789abcdef".into(),
            files,
            hostname: "tandem".into(),
            env: vec![("TANDEM_AGENT_TOKEN".into(), "t0k".into())],
            init: vec![
                "/run/tandem/bin/tandem-workspace-agent".into(),
                "serve".into(),
            ],
            limits: Limits {
                memory_bytes: 2 << 30,
                pids: 4096,
                cpus: 1.5,
                disk_bytes: 10 << 30,
            },
            egress: None,
        }
    }

    #[test]
    fn a_workspace_pod_is_confined_limited_and_labelled() {
        let pod = build(
            &spec(Files::image("127.0.0.1:5000/ws@sha256:ab")),
            &settings(),
        )
        .unwrap();
        let v = serde_json::to_value(&pod).unwrap();
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["image"], "127.0.0.1:5000/ws@sha256:ab");
        assert_eq!(
            c["command"],
            json!([
                "/bin/sh",
                "-c",
                "if [ -x /usr/bin/dumb-init ]; then exec /usr/bin/dumb-init --single-child -- \"$@\"; fi; exec /usr/bin/tini -s -- \"$@\"",
                "sh",
                "/run/tandem/bin/tandem-workspace-agent",
                "serve"
            ])
        );
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        // The one container that may take the network away does, before the workspace.
        let init = &v["spec"]["initContainers"][0];
        let command = init["command"][2].as_str().unwrap();
        assert!(
            command.contains(&format!(
                "{} isolate-network",
                tandem_protocol::agent::BINARY
            )),
            "{command}"
        );
        assert_eq!(
            init["securityContext"]["capabilities"],
            json!({ "drop": ["ALL"], "add": ["NET_ADMIN"] })
        );
        assert_eq!(init["securityContext"]["allowPrivilegeEscalation"], false);
        let caps = c["securityContext"]["capabilities"]["add"].to_string();
        assert!(
            !caps.contains("NET_ADMIN"),
            "the workspace cannot bring a link up: {caps}"
        );
        assert!(
            !caps.contains("NET_RAW") && !caps.contains("SYS_ADMIN"),
            "{caps}"
        );
        assert_eq!(
            v["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(v["spec"]["automountServiceAccountToken"], false);
        assert_eq!(v["spec"]["enableServiceLinks"], false);
        assert_eq!(v["spec"]["restartPolicy"], "Never");
        let limits = &c["resources"]["limits"];
        assert_eq!(limits["cpu"], "1500m");
        assert_eq!(limits["memory"], (2i64 << 30).to_string());
        assert_eq!(limits["ephemeral-storage"], (10i64 << 30).to_string());
        // The node reserves less than the limits, the disk whole.
        let requests = &c["resources"]["requests"];
        assert_eq!(requests["cpu"], "375m");
        assert_eq!(requests["memory"], (1i64 << 30).to_string());
        assert_eq!(requests["ephemeral-storage"], (10i64 << 30).to_string());
        let env = c["env"].to_string();
        assert!(
            env.contains("TANDEM_AGENT_TOKEN") && env.contains(AGENT_LISTEN),
            "{env}"
        );
        assert_eq!(v["metadata"]["labels"][INSTALLATION_LABEL], "abc123");
        assert!(v["spec"].get("runtimeClassName").is_none());
        assert!(v["spec"].get("hostUsers").is_none());
    }

    #[test]
    fn a_pod_with_an_allow_list_names_the_proxy_and_carries_its_rules() {
        let plain = build(&spec(Files::image("r/ws@sha256:ab")), &settings()).unwrap();
        assert_eq!(egress(&plain), None);
        let env = serde_json::to_value(&plain).unwrap()["spec"]["containers"][0]["env"].clone();
        assert!(
            !env.to_string().contains("PROXY"),
            "no proxy without an allow-list: {env}"
        );
        let mut want = spec(Files::image("r/ws@sha256:ab"));
        let rules = crate::runtime::network::Egress {
            allow: vec!["example.com".into(), "*.crates.io".into()],
            hosts: [(
                "example.com".to_string(),
                vec!["192.0.2.1".parse().unwrap()],
            )]
            .into(),
            ask: true,
        };
        want.egress = Some(rules.clone());
        let pod = build(&want, &settings()).unwrap();
        assert_eq!(
            egress(&pod),
            Some(rules),
            "a restarted server reads them back"
        );
        let env = serde_json::to_value(&pod).unwrap()["spec"]["containers"][0]["env"].clone();
        let value = |name: &str| {
            env.as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].clone())
        };
        assert_eq!(value("HTTPS_PROXY"), Some(json!("http://127.0.0.1:7312")));
        assert_eq!(value("http_proxy"), Some(json!("http://127.0.0.1:7312")));
        assert_eq!(
            value(tandem_protocol::agent::EGRESS_PROXY_ENV),
            Some(json!("1"))
        );
        assert_eq!(value("NO_PROXY"), Some(json!("localhost,127.0.0.1,::1")));
    }

    #[test]
    fn a_runtime_class_and_user_namespaces_are_asked_for_when_set() {
        let s = Settings {
            runtime_class: Some("gvisor".into()),
            user_namespaces: true,
            ..settings()
        };
        let v = serde_json::to_value(build(&spec(Files::image("r/ws:1")), &s).unwrap()).unwrap();
        assert_eq!(v["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(v["spec"]["hostUsers"], false);
    }

    #[test]
    fn this_machines_layers_binds_and_bad_names_are_refused() {
        let local = Files::local(vec!["/layers/a".into()], vec![]);
        let e = build(&spec(local), &settings()).unwrap_err().to_string();
        assert!(e.contains("names no image"), "{e}");
        let mut bound = Files::image("r/ws:1");
        bound.binds.push(crate::runtime::oci::Bind {
            host: "/etc".into(),
            container: "/host-etc".into(),
            readonly: true,
        });
        let e = build(&spec(bound), &settings()).unwrap_err().to_string();
        assert!(e.contains("binds this machine's files"), "{e}");
        for bad in ["S-UPPER", "-lead", "trail-", "", &"x".repeat(64)] {
            let mut s = spec(Files::image("r/ws:1"));
            s.id = bad.to_string();
            assert!(build(&s, &settings()).is_err(), "{bad:?} named a pod");
        }
    }

    #[test]
    fn the_isolation_policy_denies_every_direction_to_the_installations_workspaces() {
        let p = isolation(&settings());
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(p["spec"]["ingress"], json!([]));
        assert_eq!(p["spec"]["egress"], json!([]));
        let sel = &p["spec"]["podSelector"]["matchLabels"];
        assert_eq!(sel[INSTALLATION_LABEL], "abc123");
        assert_eq!(sel[COMPONENT_LABEL], WORKSPACE);
        let _: k8s_openapi::api::networking::v1::NetworkPolicy = serde_json::from_value(p).unwrap();
    }
}
