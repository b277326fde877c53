//! Sealing what a request hands to the worker that must stay secret (the caller's token, so the
//! worker can create the cluster's application credential as the caller): AES-256-GCM with the
//! deployment's key (`[operations] seal_key`, or one generated at start). A sealed value names
//! its key by a short hash, so a replica with another key says so instead of failing obscurely.
//!
//! Hand-rolled framing around `aws-lc-rs`'s AEAD (already the TLS provider of the process)
//! rather than a higher-level crate: one key, one algorithm, one format.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

const KEY_LEN: usize = 32;
const KEY_ID_LEN: usize = 8;

/// Why a value could not be sealed or unsealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("the seal key must be {KEY_LEN} bytes, base64-encoded")]
    BadKey,
    #[error("sealed with another key (set the same [operations] seal_key on every replica)")]
    OtherKey,
    #[error("the sealed value is damaged")]
    Damaged,
    #[error("no randomness available")]
    Random,
}

/// The deployment's sealing key.
pub struct Sealer {
    key: LessSafeKey,
    id: [u8; KEY_ID_LEN],
    rng: SystemRandom,
    /// Generated at start (not from the configuration): sealed values die with the process.
    pub ephemeral: bool,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("key_id", &hex::encode(self.id))
            .field("ephemeral", &self.ephemeral)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// From `[operations] seal_key` (base64 of 32 bytes), or a fresh random key when unset.
    pub fn new(configured: Option<&SecretString>) -> Result<Self, SealError> {
        let rng = SystemRandom::new();
        let (bytes, ephemeral) = match configured {
            Some(k) => {
                let b = STANDARD
                    .decode(k.expose_secret().trim())
                    .map_err(|_| SealError::BadKey)?;
                (b, false)
            }
            None => {
                let mut b = vec![0u8; KEY_LEN];
                rng.fill(&mut b).map_err(|_| SealError::Random)?;
                (b, true)
            }
        };
        if bytes.len() != KEY_LEN {
            return Err(SealError::BadKey);
        }
        let digest = Sha256::digest(&bytes);
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self {
            key: LessSafeKey::new(key),
            id,
            rng,
            ephemeral,
        })
    }

    /// `base64(key id ‖ nonce ‖ ciphertext ‖ tag)`.
    pub fn seal(&self, plain: &SecretString) -> Result<String, SealError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut data = plain.expose_secret().as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&self.id),
                &mut data,
            )
            .map_err(|_| SealError::Damaged)?;
        let mut out = Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + data.len());
        out.extend_from_slice(&self.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        Ok(STANDARD.encode(out))
    }

    pub fn unseal(&self, sealed: &str) -> Result<SecretString, SealError> {
        let raw = STANDARD.decode(sealed).map_err(|_| SealError::Damaged)?;
        if raw.len() < KEY_ID_LEN + NONCE_LEN {
            return Err(SealError::Damaged);
        }
        let (id, rest) = raw.split_at(KEY_ID_LEN);
        if id != self.id {
            return Err(SealError::OtherKey);
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Damaged)?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(&self.id), &mut body)
            .map_err(|_| SealError::Damaged)?;
        let text = String::from_utf8(plain.to_vec()).map_err(|_| SealError::Damaged)?;
        Ok(SecretString::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_with_their_key_and_never_show_the_secret() {
        let a = Sealer::new(None).unwrap();
        let b = Sealer::new(None).unwrap();
        let token = SecretString::from("gAAAAAB-a-keystone-token".to_string());
        let sealed = a.seal(&token).unwrap();
        assert!(!sealed.contains("keystone-token"));
        assert_ne!(sealed, a.seal(&token).unwrap(), "a fresh nonce every time");
        assert_eq!(
            a.unseal(&sealed).unwrap().expose_secret(),
            token.expose_secret()
        );
        assert_eq!(b.unseal(&sealed).unwrap_err(), SealError::OtherKey);
        let mut damaged = STANDARD.decode(&sealed).unwrap();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(
            a.unseal(&STANDARD.encode(damaged)).unwrap_err(),
            SealError::Damaged
        );
    }

    #[test]
    fn configured_keys_are_32_bytes_of_base64() {
        let key = SecretString::from(STANDARD.encode([7u8; 32]));
        let s = Sealer::new(Some(&key)).unwrap();
        assert!(!s.ephemeral);
        let again = Sealer::new(Some(&key)).unwrap();
        let sealed = s.seal(&SecretString::from("t".to_string())).unwrap();
        assert_eq!(again.unseal(&sealed).unwrap().expose_secret(), "t");
        let short = SecretString::from(STANDARD.encode([7u8; 16]));
        assert_eq!(Sealer::new(Some(&short)).unwrap_err(), SealError::BadKey);
    }
}
