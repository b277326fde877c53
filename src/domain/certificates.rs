//! The cluster CAs the certificates API names (`ca_cert_type`).

/// Which of the cluster's CAs (`ca_cert_type` of the certificates API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKind {
    Kubernetes,
    Etcd,
    FrontProxy,
}

impl CaKind {
    pub const ALL: [CaKind; 3] = [CaKind::Kubernetes, CaKind::Etcd, CaKind::FrontProxy];

    /// From `ca_cert_type` (absent or empty = kubernetes, as Magnum's conductor picks);
    /// `None` for anything else.
    pub fn parse(t: Option<&str>) -> Option<CaKind> {
        match t {
            None | Some("" | "kubernetes") => Some(CaKind::Kubernetes),
            Some("etcd") => Some(CaKind::Etcd),
            Some("front_proxy" | "front-proxy") => Some(CaKind::FrontProxy),
            Some(_) => None,
        }
    }
}
