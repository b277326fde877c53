//! kubeadm on a booted Machine, modelled against the cluster's PKI (see `pki`): the bootstrap
//! data CAPI renders (the CA Secrets of the moment), `kubeadm init` or `join` with discovery
//! pins, TLS and etcd peer trust, and the reasons a failure leaves on the Machine.

use serde_json::Value;

use super::ctx::{Ctx, failure_message};
use crate::simkube::objects::*;
use crate::simkube::pki::{Bootstrap, Ca, Installed, check_pins, parse_bundle};
use crate::simkube::store::ObjectKey;
use crate::simkube::workload;

/// `NodeHealthy` reasons of a Machine whose kubeadm failed (the failure is final: kubeadm runs
/// once; the Machine has to be replaced).
pub(super) const KUBEADM_INIT_FAILED: &str = "KubeadmInitFailed";
pub(super) const KUBEADM_JOIN_FAILED: &str = "KubeadmJoinFailed";

/// Why kubeadm failed on a Machine, if it did.
pub(super) fn kubeadm_failure(m: &Value) -> Option<String> {
    failure_message(
        m,
        "NodeHealthy",
        &[KUBEADM_INIT_FAILED, KUBEADM_JOIN_FAILED],
    )
}

/// What CAPI puts in a machine's bootstrap data: the CA Secrets as they are now (etcd and
/// front-proxy for control-plane machines only).
pub(super) fn capture_bootstrap(
    cx: &Ctx<'_>,
    ns: &str,
    cluster: &str,
    control_plane: bool,
) -> Bootstrap {
    let read = |suffix: &str| {
        let secret = format!("{cluster}-{suffix}");
        cx.get(Kind::Secret, ns, &secret)
            .map(|s| Ca::from_secret(&s, &secret))
    };
    Bootstrap {
        ca: read("ca"),
        etcd: control_plane.then(|| read("etcd")).flatten(),
        proxy: control_plane.then(|| read("proxy")).flatten(),
    }
}

/// What kubeadm did on a booted machine.
pub(super) struct Kubeadm {
    /// `kubeadm init` (the first control-plane machine creates the workload cluster, its
    /// `cluster-info` carrying the CA bundle it installed), else `kubeadm join`.
    pub(super) init: bool,
    /// What it installed, or why it failed.
    pub(super) result: Result<Installed, String>,
}

/// kubeadm init/join of one machine against the cluster's modelled PKI: discovery pins
/// (`cluster-info` must hold a pinned `<cluster>-ca` key), then TLS with every Ready
/// control-plane machine (each side trusts the other's `ca` signer), then etcd peer TLS for
/// control-plane machines (each side trusts the other's etcd signer). `None`: nothing to join
/// yet (no workload cluster or no Ready control-plane machine).
pub(super) fn kubeadm(
    cx: &Ctx<'_>,
    key: &ObjectKey,
    cluster: &str,
    control_plane: bool,
) -> Option<Kubeadm> {
    let ns = key.namespace.as_str();
    let bootstrap = cx
        .sim
        .bootstrap(key, &|| capture_bootstrap(cx, ns, cluster, control_plane));
    let workload = cx.sim.workloads().get(ns, cluster);
    let init = control_plane && workload.is_none();
    let verb = if init { "kubeadm init" } else { "kubeadm join" };
    let fail = |message: String| {
        Some(Kubeadm {
            init,
            result: Err(format!("{verb}: {message}")),
        })
    };
    if let Some(e) = bootstrap.local_error(control_plane) {
        return fail(e);
    }
    if init {
        return Some(Kubeadm {
            init,
            result: Ok(Installed::control_plane(bootstrap)),
        });
    }
    let workload = workload?;
    // Discovery: the cluster-info CA data must contain a key pinned by `caCertHashes`.
    let unverified = |e: String| {
        fail(format!(
            "couldn't validate the identity of the API Server: {e}"
        ))
    };
    let discovered = match workload::cluster_info_ca(&workload) {
        Err(e) => return unverified(e),
        Ok(None) => None,
        Ok(Some(pem)) => match parse_bundle(&pem) {
            Ok(trust) => Some(Ca {
                pem,
                trust,
                key_error: None,
                key: None,
            }),
            Err(e) => {
                return unverified(format!(
                    "the certificate-authority-data of the cluster-info ConfigMap: {e}"
                ));
            }
        },
    };
    if let Some(Ok(ca)) = &bootstrap.ca {
        let presented = discovered.as_ref().map_or(&[][..], |c| c.trust.as_slice());
        if let Err(e) = check_pins(&ca.pins(), presented) {
            return fail(e);
        }
    }
    let peers = cx.sim.control_plane_pki(ns, cluster, true);
    let (_, oldest) = peers.first()?;
    let installed = if control_plane {
        Installed::control_plane(bootstrap)
    } else {
        // A worker trusts what discovery found; its kubelet client certificate comes from the
        // control plane's signer.
        Installed {
            ca_trust: discovered,
            ca_signer: oldest.ca_signer.clone(),
            etcd: None,
            serving_ca: None,
        }
    };
    for (peer, theirs) in &peers {
        if let (Some(trust), Some(signer)) = (&installed.ca_trust, &theirs.ca_signer)
            && !trust.trusts(signer)
        {
            return fail(format!(
                "tls: failed to verify certificate: x509: certificate signed by unknown authority \
                 (this machine does not trust the CA {} that signs the serving certificate of \
                 control plane machine {peer})",
                signer.describe()
            ));
        }
        if let (Some(signer), Some(trust)) = (&installed.ca_signer, &theirs.ca_trust)
            && !trust.trusts(signer)
        {
            return fail(format!(
                "Unauthorized: control plane machine {peer} does not trust the CA {} that signs \
                 this machine's client certificate",
                signer.describe()
            ));
        }
        let (Some(mine), Some(their_etcd)) = (&installed.etcd, &theirs.etcd) else {
            continue;
        };
        if let Some(signer) = mine.signer()
            && !their_etcd.trusts(signer)
        {
            return fail(format!(
                "[etcd] failed to add this machine as an etcd member: remote error: tls: bad \
                 certificate (control plane machine {peer} does not trust the etcd CA {} that \
                 signs this machine's peer certificate)",
                signer.describe()
            ));
        }
        if let Some(signer) = their_etcd.signer()
            && !mine.trusts(signer)
        {
            return fail(format!(
                "[etcd] failed to add this machine as an etcd member: tls: failed to verify \
                 certificate: x509: certificate signed by unknown authority (this machine does \
                 not trust the etcd CA {} that signs the peer certificate of control plane \
                 machine {peer})",
                signer.describe()
            ));
        }
    }
    Some(Kubeadm {
        init,
        result: Ok(installed),
    })
}
