//! The API on a virtual IP held by the control-plane machines (`kube_vip_enabled`) instead of an
//! Octavia load balancer: kube-vip as a static pod on every control-plane machine (ARP, leader
//! election among them), the address kept out of the managed subnet's allocation pools (or
//! given: `api_server_fixed_ip`), admitted by port security on the control-plane ports (allowed
//! address pairs), CAPO's `apiServerFixedIP`. Label names are magnum-cluster-api's (its PR #1141).

use std::net::{IpAddr, Ipv4Addr};

use super::cx::Cx;
use super::document::{AllocationPool, ApiVip, ManagedSubnet, Networking, NodeFile};
use super::error::{ValuesError, bad};
use super::labels::parse_cidr;

/// Whether the API gets a virtual IP instead of an Octavia load balancer.
pub(super) const ENABLED: &str = "kube_vip_enabled";
/// The virtual IP (with a fixed network: required, an unused address of its subnet).
pub(super) const FIXED_IP: &str = "api_server_fixed_ip";
const INTERFACE: &str = "kube_vip_interface";
const IMAGE: &str = "kube_vip_image";

/// Where kubelet finds the static pod.
pub const MANIFEST_PATH: &str = "/etc/kubernetes/manifests/kube-vip.yaml";
const ADMIN_CONF: &str = "/etc/kubernetes/admin.conf";
const SUPER_ADMIN_CONF: &str = "/etc/kubernetes/super-admin.conf";

impl Cx<'_> {
    /// The API's virtual IP when `kube_vip_enabled`; with a managed subnet the subnet's
    /// allocation pools leave it out (`managed`).
    pub(super) fn api_vip(
        &self,
        networking: &Networking,
        api_port: u16,
    ) -> Result<Option<ApiVip>, ValuesError> {
        let view = &self.view;
        let fixed = view.parsed(&[FIXED_IP], |v| {
            v.parse::<Ipv4Addr>()
                .map_err(|_| "must be an IPv4 address".to_owned())
        })?;
        if !view.bool(&[ENABLED], false)? {
            for label in [INTERFACE, IMAGE] {
                if let Some((label, v)) = view.raw(&[label])? {
                    return Err(bad(label, v, format!("needs {ENABLED}=true")));
                }
            }
            return Ok(None);
        }
        let address = match (&networking.managed_subnet, fixed) {
            (Some(m), fixed) => {
                let (net, len) = v4_net(&m.cidr)?;
                let hosts = usable(net, len).ok_or_else(|| {
                    ValuesError::Invalid(format!(
                        "{ENABLED}: the node subnet {} has no room for a virtual IP",
                        m.cidr
                    ))
                })?;
                match fixed {
                    None => *hosts.end(),
                    Some(ip) if hosts.contains(&ip) => ip,
                    Some(ip) => {
                        return Err(bad(
                            FIXED_IP,
                            &ip.to_string(),
                            format!(
                                "must be an address of the node subnet {} other than its \
                                 network, gateway and broadcast addresses",
                                m.cidr
                            ),
                        ));
                    }
                }
            }
            (None, Some(ip)) => ip,
            (None, None) => {
                return Err(ValuesError::Invalid(format!(
                    "{ENABLED} with a fixed network needs {FIXED_IP}: an address of its subnet \
                     that no port uses, for the Kubernetes API"
                )));
            }
        };
        let interface = view.parsed(&[INTERFACE], |v| {
            if !v.is_empty()
                && v.len() <= 15
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
            {
                Ok(v.to_owned())
            } else {
                Err("must be a network interface name like ens3".into())
            }
        })?;
        let image = match view.token(&[IMAGE])? {
            Some(image) => image,
            None => match super::images::prefix(view)? {
                Some(prefix) => super::images::under_prefix(&prefix, &self.config.kube_vip_image),
                None => self.config.kube_vip_image.clone(),
            },
        };
        // kubeadm 1.29+ grants admin.conf its rights only after the API answers on the
        // endpoint, which kube-vip is yet to bring up: on the first machine (the one kubeadm
        // initialises, `/run/kubeadm/kubeadm.yaml`) kube-vip starts with super-admin.conf.
        let swap = super_admin_conf(&self.kube_version);
        let edit = |from: &str, to: &str| {
            format!(
                "if [ -f /run/kubeadm/kubeadm.yaml ]; then sed -i 's#path: {from}$#path: {to}#' \
                 {MANIFEST_PATH}; fi"
            )
        };
        Ok(Some(ApiVip {
            address: address.to_string(),
            manifest: NodeFile {
                path: MANIFEST_PATH.into(),
                owner: "root:root".into(),
                permissions: "0600".into(),
                content: manifest(&address.to_string(), interface.as_deref(), &image, api_port),
            },
            pre_kubeadm_commands: swap
                .then(|| edit(ADMIN_CONF, SUPER_ADMIN_CONF))
                .into_iter()
                .collect(),
            post_kubeadm_commands: swap
                .then(|| edit(SUPER_ADMIN_CONF, ADMIN_CONF))
                .into_iter()
                .collect(),
            interface,
            image,
        }))
    }
}

/// The managed subnet's allocation pools without the virtual IP (Neutron's default pool, all
/// but the network, gateway and broadcast addresses, split around it).
pub(super) fn pools_without(m: &ManagedSubnet, vip: &str) -> Vec<AllocationPool> {
    let (Ok((net, len)), Ok(vip)) = (v4_net(&m.cidr), vip.parse::<Ipv4Addr>()) else {
        return Vec::new();
    };
    let Some(hosts) = usable(net, len) else {
        return Vec::new();
    };
    let (first, last, vip) = (
        u32::from(*hosts.start()),
        u32::from(*hosts.end()),
        u32::from(vip),
    );
    [
        (first, vip.saturating_sub(1)),
        (vip.saturating_add(1), last),
    ]
    .into_iter()
    .filter(|(s, e)| s <= e && *s >= first && *e <= last)
    .map(|(s, e)| AllocationPool {
        start: Ipv4Addr::from(s).to_string(),
        end: Ipv4Addr::from(e).to_string(),
    })
    .collect()
}

fn v4_net(cidr: &str) -> Result<(Ipv4Addr, u8), ValuesError> {
    match parse_cidr(cidr).map_err(ValuesError::Invalid)? {
        (IpAddr::V4(a), len) => Ok((a, len)),
        (IpAddr::V6(_), _) => Err(ValuesError::Invalid(format!(
            "{ENABLED} needs an IPv4 node subnet, not {cidr}"
        ))),
    }
}

/// The addresses Neutron hands out of `net/len` by default: after the gateway (the first
/// host), before the broadcast address; `None` when fewer than two.
fn usable(net: Ipv4Addr, len: u8) -> Option<std::ops::RangeInclusive<Ipv4Addr>> {
    if len > 29 {
        return None;
    }
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    let base = u32::from(net) & mask;
    let broadcast = base | !mask;
    Some(Ipv4Addr::from(base + 2)..=Ipv4Addr::from(broadcast - 1))
}

/// Whether kubeadm of `version` (`v1.29.0`) writes super-admin.conf.
fn super_admin_conf(version: &str) -> bool {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(1), Some(m)) if m >= 29) || major.is_some_and(|m| m > 1)
}

/// kube-vip's static pod: ARP mode, control-plane leader election in kube-system, the API
/// reached on this machine (`kubernetes` → 127.0.0.1; its certificate names `kubernetes`).
fn manifest(address: &str, interface: Option<&str>, image: &str, port: u16) -> String {
    let interface = interface
        .map(|i| format!("    - name: vip_interface\n      value: \"{i}\"\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: kube-vip
  namespace: kube-system
spec:
  hostNetwork: true
  hostAliases:
  - hostnames:
    - kubernetes
    ip: 127.0.0.1
  containers:
  - name: kube-vip
    image: {image}
    imagePullPolicy: IfNotPresent
    args:
    - manager
    env:
    - name: address
      value: \"{address}\"
    - name: port
      value: \"{port}\"
    - name: vip_arp
      value: \"true\"
    - name: vip_cidr
      value: \"32\"
{interface}    - name: cp_enable
      value: \"true\"
    - name: cp_namespace
      value: kube-system
    - name: vip_leaderelection
      value: \"true\"
    - name: vip_leasename
      value: plndr-cp-lock
    - name: vip_leaseduration
      value: \"5\"
    - name: vip_renewdeadline
      value: \"3\"
    - name: vip_retryperiod
      value: \"1\"
    - name: vip_nodename
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    securityContext:
      capabilities:
        add:
        - NET_ADMIN
        - NET_RAW
    volumeMounts:
    - name: kubeconfig
      mountPath: {ADMIN_CONF}
  volumes:
  - name: kubeconfig
    hostPath:
      type: FileOrCreate
      path: {ADMIN_CONF}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet(cidr: &str) -> ManagedSubnet {
        ManagedSubnet {
            cidr: cidr.into(),
            dns_nameservers: Vec::new(),
            allocation_pools: Vec::new(),
        }
    }

    #[test]
    fn the_pools_leave_out_the_virtual_ip() {
        let pools = pools_without(&subnet("10.0.0.0/24"), "10.0.0.254");
        assert_eq!(pools.len(), 1);
        assert_eq!(
            (pools[0].start.as_str(), pools[0].end.as_str()),
            ("10.0.0.2", "10.0.0.253")
        );
        let pools = pools_without(&subnet("10.0.0.0/24"), "10.0.0.100");
        let got: Vec<_> = pools
            .iter()
            .map(|p| (p.start.as_str(), p.end.as_str()))
            .collect();
        assert_eq!(
            got,
            [("10.0.0.2", "10.0.0.99"), ("10.0.0.101", "10.0.0.254")]
        );
    }

    #[test]
    fn super_admin_conf_from_1_29() {
        assert!(!super_admin_conf("v1.28.9"));
        assert!(super_admin_conf("v1.29.0"));
        assert!(super_admin_conf("v1.33.5"));
    }

    #[test]
    fn the_manifest_is_a_pod_of_kube_vip_for_the_address() {
        let m = manifest("10.0.0.254", Some("ens3"), "kube-vip:v1", 6443);
        let pod: serde_json::Value = yaml_serde::from_str(&m).unwrap();
        assert_eq!(pod["kind"], "Pod");
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["image"], "kube-vip:v1");
        let env = |name: &str| {
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == name)
                .map(|e| e["value"].clone())
        };
        assert_eq!(env("address"), Some("10.0.0.254".into()));
        assert_eq!(env("port"), Some("6443".into()));
        assert_eq!(env("vip_interface"), Some("ens3".into()));
        assert_eq!(env("cp_enable"), Some("true".into()));
        assert_eq!(pod["spec"]["hostAliases"][0]["ip"], "127.0.0.1");
        let auto = manifest("10.0.0.254", None, "kube-vip:v1", 6443);
        assert!(!auto.contains("vip_interface"), "{auto}");
    }

    #[test]
    fn the_swap_edits_the_host_path_only() {
        let m = manifest("10.0.0.254", None, "kube-vip:v1", 6443);
        assert_eq!(m.matches(&format!("path: {ADMIN_CONF}\n")).count(), 1);
        assert!(m.contains(&format!("mountPath: {ADMIN_CONF}\n")));
    }
}
