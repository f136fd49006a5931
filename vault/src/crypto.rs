//! The vault's cryptography: the key derived from `NEXBOT_MASTER_KEY`, and each value sealed
//! with XChaCha20-Poly1305 under it.
//!
//! Why these choices: XChaCha20-Poly1305's 192-bit nonces can be drawn at random for every
//! value without a counter to keep (no nonce reuse however many times secrets are set);
//! Argon2id makes each guess at a weak master key cost memory and time for whoever holds the
//! database file. The associated data binds a sealed value to its scope and name, so moving a
//! row to another chat or renaming it in the database makes it fail to open instead of
//! handing one chat's token to another.

use argon2::{Algorithm, Argon2, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use secrecy::{ExposeSecret, SecretString};
use zeroize::Zeroizing;

/// The KDF written into `vault_meta.kdf` for new vaults. Stored per vault, so a later release
/// can raise the cost without losing what older vaults hold. Argon2id with OWASP's
/// recommended minimum (19 MiB, 2 passes, 1 lane): about 30 ms once at start-up.
pub(super) const KDF: &str = "argon2id:m=19456,t=2,p=1";
pub(super) const SALT_BYTES: usize = 16;
pub(super) const NONCE_BYTES: usize = 24;
/// What the check value of `vault_meta` seals: opening it proves the master key is the one
/// the vault was written with, before any secret is tried.
const CHECK_PLAINTEXT: &[u8] = b"nexbot vault key check";
const CHECK_AD: &[u8] = b"nexbot-vault/1\0check";

/// A master key shorter than this is refused: it would protect nothing.
pub const MIN_MASTER_KEY_CHARS: usize = 16;

/// Why a key could not be made or a value not sealed/opened. Never holds key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("unknown key derivation {0:?} in the vault (written by a newer nexbot?)")]
    UnknownKdf(String),
    #[error("key derivation failed: {0}")]
    Kdf(String),
    #[error("the system random number generator failed: {0}")]
    Random(String),
    /// Wrong key, or the sealed bytes, nonce, scope or name were changed.
    #[error("authentication failed")]
    Open,
}

/// The vault key. The cipher zeroizes its key schedule on drop (`chacha20poly1305`'s
/// `ZeroizeOnDrop`); the derived bytes never outlive [`VaultKey::derive`].
pub(super) struct VaultKey(XChaCha20Poly1305);

impl std::fmt::Debug for VaultKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VaultKey(..)")
    }
}

fn kdf_params(kdf: &str) -> Result<Params, CryptoError> {
    let unknown = || CryptoError::UnknownKdf(kdf.to_owned());
    let rest = kdf.strip_prefix("argon2id:").ok_or_else(unknown)?;
    let (mut m, mut t, mut p) = (None, None, None);
    for part in rest.split(',') {
        let (key, value) = part.split_once('=').ok_or_else(unknown)?;
        let value: u32 = value.parse().map_err(|_| unknown())?;
        match key {
            "m" => m = Some(value),
            "t" => t = Some(value),
            "p" => p = Some(value),
            _ => return Err(unknown()),
        }
    }
    let (Some(m), Some(t), Some(p)) = (m, t, p) else { return Err(unknown()) };
    Params::new(m, t, p, Some(32)).map_err(|e| CryptoError::Kdf(e.to_string()))
}

impl VaultKey {
    /// Stretches `master` with the vault's `kdf` and `salt`.
    pub(super) fn derive(
        master: &SecretString,
        kdf: &str,
        salt: &[u8],
    ) -> Result<Self, CryptoError> {
        let params = kdf_params(kdf)?;
        let mut key = Zeroizing::new([0u8; 32]);
        Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
            .hash_password_into(master.expose_secret().as_bytes(), salt, key.as_mut())
            .map_err(|e| CryptoError::Kdf(e.to_string()))?;
        let cipher = XChaCha20Poly1305::new_from_slice(key.as_ref())
            .map_err(|e| CryptoError::Kdf(e.to_string()))?;
        Ok(Self(cipher))
    }

    /// Seals `value` for `scope`/`name` with its `binding` (mode and hosts, as stored):
    /// (nonce, ciphertext with tag).
    pub(super) fn seal(
        &self,
        scope: &str,
        name: &str,
        binding: &str,
        value: &[u8],
    ) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
        self.seal_with(&associated_data(scope, name, binding), value)
    }

    /// Opens what [`VaultKey::seal`] sealed for the same `scope`, `name` and `binding`.
    pub(super) fn open(
        &self,
        scope: &str,
        name: &str,
        binding: &str,
        nonce: &[u8],
        sealed: &[u8],
    ) -> Result<SecretString, CryptoError> {
        let plain = self.open_with(&associated_data(scope, name, binding), nonce, sealed)?;
        let text = String::from_utf8(plain.to_vec()).map_err(|e| {
            // The bytes authenticated, so this was sealed as text; never reached in practice.
            let mut bytes = e.into_bytes();
            zeroize::Zeroize::zeroize(&mut bytes);
            CryptoError::Open
        })?;
        Ok(SecretString::from(text))
    }

    /// A fresh check value: (nonce, sealed).
    pub(super) fn seal_check(&self) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
        self.seal_with(CHECK_AD, CHECK_PLAINTEXT)
    }

    /// Whether this key opens the vault's check value.
    pub(super) fn opens_check(&self, nonce: &[u8], sealed: &[u8]) -> bool {
        self.open_with(CHECK_AD, nonce, sealed)
            .is_ok_and(|plain| plain.as_slice() == CHECK_PLAINTEXT)
    }

    fn seal_with(&self, ad: &[u8], value: &[u8]) -> Result<(Vec<u8>, Vec<u8>), CryptoError> {
        let nonce = random::<NONCE_BYTES>()?;
        let sealed = self
            .0
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: value, aad: ad })
            .map_err(|_| CryptoError::Open)?;
        Ok((nonce.to_vec(), sealed))
    }

    fn open_with(
        &self,
        ad: &[u8],
        nonce: &[u8],
        sealed: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, CryptoError> {
        if nonce.len() != NONCE_BYTES {
            return Err(CryptoError::Open);
        }
        self.0
            .decrypt(XNonce::from_slice(nonce), Payload { msg: sealed, aad: ad })
            .map(Zeroizing::new)
            .map_err(|_| CryptoError::Open)
    }
}

/// `nexbot-vault/1 NUL scope NUL name NUL binding`: neither scope nor name can hold a NUL
/// (scopes are chat references or `operator`, names are `[A-Z_][A-Z0-9_]*`), and the binding
/// (mode and hosts as stored) is last, so no two triples collide. Binding the mode and hosts
/// in means a write to the database cannot re-point a secret at another host or switch it to
/// stdin mode (which would ship the value into containers) without the key.
fn associated_data(scope: &str, name: &str, binding: &str) -> Vec<u8> {
    format!("nexbot-vault/1\0{scope}\0{name}\0{binding}").into_bytes()
}

pub(super) fn random<const N: usize>() -> Result<[u8; N], CryptoError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| CryptoError::Random(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(master: &str, salt: &[u8]) -> VaultKey {
        // The real parameters are slow in a debug build; the cheapest Argon2id for tests.
        VaultKey::derive(&SecretString::from(master.to_owned()), "argon2id:m=64,t=1,p=1", salt)
            .unwrap()
    }

    #[test]
    fn a_value_opens_only_under_its_key_scope_and_name() {
        let k = key("correct horse battery staple", b"0123456789abcdef");
        let (nonce, sealed) = k.seal("telegram:1", "TOKEN", "proxy", b"ghp_value_12345").unwrap();
        assert_eq!(
            k.open("telegram:1", "TOKEN", "proxy", &nonce, &sealed).unwrap().expose_secret(),
            "ghp_value_12345"
        );
        assert_eq!(
            k.open("telegram:2", "TOKEN", "proxy", &nonce, &sealed).unwrap_err(),
            CryptoError::Open
        );
        assert_eq!(
            k.open("telegram:1", "OTHER", "proxy", &nonce, &sealed).unwrap_err(),
            CryptoError::Open
        );
        let other = key("another master key entirely", b"0123456789abcdef");
        assert_eq!(
            other.open("telegram:1", "TOKEN", "proxy", &nonce, &sealed).unwrap_err(),
            CryptoError::Open
        );
        let salted = key("correct horse battery staple", b"fedcba9876543210");
        assert!(salted.open("telegram:1", "TOKEN", "proxy", &nonce, &sealed).is_err());
        assert!(k.open("telegram:1", "TOKEN", "stdin", &nonce, &sealed).is_err(), "mode bound");
        assert!(k.open("telegram:1", "TOKEN", "stdin", &nonce, &sealed).is_err(), "binding");
        let mut flipped = sealed.clone();
        flipped[0] ^= 1;
        assert!(k.open("telegram:1", "TOKEN", "proxy", &nonce, &flipped).is_err());
        assert!(k.open("telegram:1", "TOKEN", "proxy", &nonce[..12], &sealed).is_err());
        // A fresh nonce each time: the same value never seals to the same bytes.
        let (nonce2, sealed2) = k.seal("telegram:1", "TOKEN", "proxy", b"ghp_value_12345").unwrap();
        assert_ne!((nonce, sealed), (nonce2, sealed2));
    }

    #[test]
    fn the_check_value_tells_the_right_key_from_a_wrong_one() {
        let k = key("correct horse battery staple", b"0123456789abcdef");
        let (nonce, sealed) = k.seal_check().unwrap();
        assert!(k.opens_check(&nonce, &sealed));
        assert!(!key("wrong key wrong key", b"0123456789abcdef").opens_check(&nonce, &sealed));
    }

    #[test]
    fn kdf_strings_are_parsed_strictly() {
        assert!(kdf_params(KDF).is_ok());
        for bad in
            ["scrypt:n=1", "argon2id:m=1", "argon2id:m=x,t=1,p=1", "argon2id:m=64,t=1,p=1,q=2"]
        {
            assert!(matches!(kdf_params(bad), Err(CryptoError::UnknownKdf(_))), "{bad}");
        }
    }
}
