//! The control plane's certificates and keys, generated in memory with rcgen (ECDSA P-256).
//!
//! One CA signs the kube-apiserver serving certificate and every client certificate. The
//! apiserver trusts the CA for client authentication (`--client-ca-file`), which maps a client
//! certificate's CN to the user name and its O to a group.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// The test CA: signs the serving certificate and client certificates.
pub(crate) struct Pki {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
}

/// PEM files of a certificate and its private key on disk.
#[derive(Debug, Clone)]
pub(crate) struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

impl Pki {
    /// Generates a new CA.
    pub fn new() -> Result<Self, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "conclave-testkit-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Self {
            issuer: Issuer::new(params, key),
            ca_pem: cert.pem(),
        })
    }

    /// The CA certificate in PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes a serving certificate for 127.0.0.1 / localhost, the in-cluster names and the
    /// addresses pods reach the API server at on a [`crate::Node`] (the `kubernetes` Service's
    /// 10.0.0.1, the node's 10.244.0.1) to `dir/<name>.crt` and `dir/<name>.key`.
    pub fn write_serving_cert(&self, dir: &Path, name: &str) -> Result<CertFiles, Error> {
        let mut params = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ])?;
        for ip in [
            Ipv4Addr::LOCALHOST,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 244, 0, 1),
        ] {
            params
                .subject_alt_names
                .push(rcgen::SanType::IpAddress(IpAddr::V4(ip)));
        }
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.write_signed(dir, name, &params)
    }

    /// Writes a client certificate for user `user` in group `group` (certificate O; at most one,
    /// which is all the apiserver needs for `system:masters` and component identities).
    pub fn write_client_cert(
        &self,
        dir: &Path,
        file_stem: &str,
        user: &str,
        group: Option<&str>,
    ) -> Result<CertFiles, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(group) = group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.write_signed(dir, file_stem, &params)
    }

    fn write_signed(
        &self,
        dir: &Path,
        stem: &str,
        params: &CertificateParams,
    ) -> Result<CertFiles, Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let files = CertFiles {
            cert: dir.join(format!("{stem}.crt")),
            key: dir.join(format!("{stem}.key")),
        };
        write_file(&files.cert, &cert.pem())?;
        write_file(&files.key, &key.serialize_pem())?;
        Ok(files)
    }
}

/// Writes a fresh ECDSA P-256 key pair for service-account tokens: the private key (PKCS#8 PEM,
/// for `--service-account-signing-key-file`) to `private` and the public key (SPKI PEM, for
/// `--service-account-key-file`, which accepts only public keys) to `public`.
pub(crate) fn write_service_account_keys(private: &Path, public: &Path) -> Result<(), Error> {
    let key = KeyPair::generate()?;
    write_file(private, &key.serialize_pem())?;
    write_file(public, &key.public_key_pem())
}

/// Writes `contents` to `path`, with the path in the error.
pub(crate) fn write_file(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(|source| Error::Io {
        context: format!("writing {}", path.display()),
        source,
    })
}
