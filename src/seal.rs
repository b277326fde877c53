//! Sealing what a request hands to the worker that must stay secret (the caller's token, so the
//! worker can create the cluster's application credential as the caller): AES-256-GCM with the
//! deployment's key ring — one current key that seals (`[operations] seal_key` or the first line
//! of `seal_key_file`) and older keys that still open (`previous_seal_keys`, the file's other
//! lines), so a rotation never fails an operation in flight. A sealed value names its key by a
//! short hash, so a replica without that key says which one it lacks.
//!
//! Hand-rolled framing around `aws-lc-rs`'s AEAD (already the TLS provider of the process)
//! rather than a higher-level crate: one algorithm, one format, keys found by id.

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
    #[error("a seal key must be {KEY_LEN} bytes, base64-encoded")]
    BadKey,
    #[error(
        "sealed with key {0}, which this replica does not hold (give every replica the same \
         [operations] seal_key; keep a rotated-out key in previous_seal_keys until no operation \
         sealed with it is left)"
    )]
    OtherKey(String),
    #[error("the sealed value is damaged")]
    Damaged,
    #[error("no randomness available")]
    Random,
}

/// One key and its id (the first bytes of its SHA-256).
struct Key {
    key: LessSafeKey,
    id: [u8; KEY_ID_LEN],
}

impl Key {
    fn from_bytes(bytes: &[u8]) -> Result<Self, SealError> {
        if bytes.len() != KEY_LEN {
            return Err(SealError::BadKey);
        }
        let digest = Sha256::digest(bytes);
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&digest[..KEY_ID_LEN]);
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| SealError::BadKey)?;
        Ok(Self {
            key: LessSafeKey::new(key),
            id,
        })
    }

    fn from_base64(text: &SecretString) -> Result<Self, SealError> {
        Self::from_bytes(&key_bytes(text).ok_or(SealError::BadKey)?)
    }
}

/// The 32 bytes of a key given as base64 (a seal key, the api-proxy key); `None` when it is not
/// base64 or not 32 bytes long.
pub fn key_bytes(text: &SecretString) -> Option<Vec<u8>> {
    STANDARD
        .decode(text.expose_secret().trim())
        .ok()
        .filter(|b| b.len() == KEY_LEN)
}

/// The deployment's key ring: the current key seals, every key opens what it sealed.
pub struct Sealer {
    /// The current key first.
    keys: Vec<Key>,
    rng: SystemRandom,
    /// Generated at start (not from the configuration): sealed values die with the process.
    pub ephemeral: bool,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("key_ids", &self.key_ids())
            .field("ephemeral", &self.ephemeral)
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// From the current key (base64 of 32 bytes) and the previous ones, or a fresh random key
    /// when none is configured (development only: `validate_for_serve` requires one otherwise).
    pub fn new(
        current: Option<&SecretString>,
        previous: &[SecretString],
    ) -> Result<Self, SealError> {
        let rng = SystemRandom::new();
        let (first, ephemeral) = match current {
            Some(k) => (Key::from_base64(k)?, false),
            None => {
                let mut b = vec![0u8; KEY_LEN];
                rng.fill(&mut b).map_err(|_| SealError::Random)?;
                (Key::from_bytes(&b)?, true)
            }
        };
        let mut keys = vec![first];
        for k in previous {
            let k = Key::from_base64(k)?;
            if !keys.iter().any(|have| have.id == k.id) {
                keys.push(k);
            }
        }
        Ok(Self {
            keys,
            rng,
            ephemeral,
        })
    }

    /// The ids (hex) of the keys held, the current one first: what `check` and the logs name
    /// (an id says which key, never the key).
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| hex::encode(k.id)).collect()
    }

    /// `base64(key id ‖ nonce ‖ ciphertext ‖ tag)` with the current key.
    pub fn seal(&self, plain: &SecretString) -> Result<String, SealError> {
        let current = self.keys.first().ok_or(SealError::BadKey)?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| SealError::Random)?;
        let mut data = plain.expose_secret().as_bytes().to_vec();
        current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&current.id),
                &mut data,
            )
            .map_err(|_| SealError::Damaged)?;
        let mut out = Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + data.len());
        out.extend_from_slice(&current.id);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&data);
        Ok(STANDARD.encode(out))
    }

    /// Opens a value sealed with any key of the ring.
    pub fn unseal(&self, sealed: &str) -> Result<SecretString, SealError> {
        let raw = STANDARD.decode(sealed).map_err(|_| SealError::Damaged)?;
        if raw.len() < KEY_ID_LEN + NONCE_LEN {
            return Err(SealError::Damaged);
        }
        let (id, rest) = raw.split_at(KEY_ID_LEN);
        let Some(key) = self.keys.iter().find(|k| k.id == id) else {
            return Err(SealError::OtherKey(hex::encode(id)));
        };
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError::Damaged)?;
        let mut body = body.to_vec();
        let plain = key
            .key
            .open_in_place(nonce, Aad::from(&key.id), &mut body)
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
        let a = Sealer::new(None, &[]).unwrap();
        let b = Sealer::new(None, &[]).unwrap();
        let token = SecretString::from("gAAAAAB-a-keystone-token".to_string());
        let sealed = a.seal(&token).unwrap();
        assert!(!sealed.contains("keystone-token"));
        assert_ne!(sealed, a.seal(&token).unwrap(), "a fresh nonce every time");
        assert_eq!(
            a.unseal(&sealed).unwrap().expose_secret(),
            token.expose_secret()
        );
        assert_eq!(
            b.unseal(&sealed).unwrap_err(),
            SealError::OtherKey(a.key_ids()[0].clone())
        );
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
        let s = Sealer::new(Some(&key), &[]).unwrap();
        assert!(!s.ephemeral);
        let again = Sealer::new(Some(&key), &[]).unwrap();
        let sealed = s.seal(&SecretString::from("t".to_string())).unwrap();
        assert_eq!(again.unseal(&sealed).unwrap().expose_secret(), "t");
        let short = SecretString::from(STANDARD.encode([7u8; 16]));
        assert_eq!(
            Sealer::new(Some(&short), &[]).unwrap_err(),
            SealError::BadKey
        );
        assert_eq!(
            Sealer::new(Some(&key), &[short]).unwrap_err(),
            SealError::BadKey
        );
    }

    #[test]
    fn a_rotated_ring_opens_what_the_old_key_sealed_and_seals_with_the_new_one() {
        let old = SecretString::from(STANDARD.encode([1u8; 32]));
        let new = SecretString::from(STANDARD.encode([2u8; 32]));
        let before = Sealer::new(Some(&old), &[]).unwrap();
        let sealed_before = before.seal(&SecretString::from("t1".to_string())).unwrap();
        let after = Sealer::new(Some(&new), std::slice::from_ref(&old)).unwrap();
        assert_eq!(after.key_ids().len(), 2);
        assert_eq!(after.unseal(&sealed_before).unwrap().expose_secret(), "t1");
        let sealed_after = after.seal(&SecretString::from("t2".to_string())).unwrap();
        // Sealed with the new key: a replica still on the old ring cannot open it, and says
        // which key it lacks.
        assert_eq!(
            before.unseal(&sealed_after).unwrap_err(),
            SealError::OtherKey(after.key_ids()[0].clone())
        );
        // The same key listed twice is held once.
        let twice = Sealer::new(Some(&new), &[old.clone(), new.clone()]).unwrap();
        assert_eq!(twice.key_ids(), after.key_ids());
    }
}
