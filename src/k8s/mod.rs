//! Kubernetes itself, as both sides of the management-cluster contract know it: what an
//! apiserver checks of an object (CRD schemas, metadata syntax), the labels CAPI and CAAPH
//! define, Secret data and PEM blocks. Neither the driver (`capi`) nor the simulated management
//! cluster (`simkube`) owns these; nothing here imports either.

pub mod labels;
pub mod pem;
pub mod schema;
pub mod secret;
