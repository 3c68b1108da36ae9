//! LeaseCandidates that behave like a live client-go candidate: registered once, then answering
//! every ping of an election controller by renewing.

use std::time::Duration;

use k8s_openapi::api::coordination::v1beta1::{LeaseCandidate, LeaseCandidateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::Error;

/// How often the responder looks for a new ping. Controllers wait 5 s for an answer.
const POLL: Duration = Duration::from_millis(250);

/// A registered LeaseCandidate whose pings are answered (`renewTime = now` whenever `pingTime` is
/// newer than `renewTime`) by a background task on the creating runtime, until dropped or
/// [`stop`](Self::stop)ped. The object itself stays in the API afterwards.
pub struct CandidateResponder {
    name: String,
    namespace: String,
    task: tokio::task::JoinHandle<()>,
}

/// Builds a LeaseCandidate `namespace/name` for Lease `lease_name`, freshly renewed.
pub fn lease_candidate(
    namespace: &str,
    name: &str,
    lease_name: &str,
    binary_version: &str,
    emulation_version: Option<&str>,
    strategy: &str,
) -> LeaseCandidate {
    LeaseCandidate {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        spec: Some(LeaseCandidateSpec {
            lease_name: lease_name.into(),
            binary_version: binary_version.into(),
            emulation_version: emulation_version.map(Into::into),
            strategy: strategy.into(),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ping_time: None,
        }),
    }
}

impl CandidateResponder {
    /// Creates `candidate` and starts answering its pings.
    pub async fn register(client: Client, candidate: LeaseCandidate) -> Result<Self, Error> {
        let namespace = candidate.metadata.namespace.clone().ok_or_else(|| {
            Error::InvalidArgument("the LeaseCandidate needs metadata.namespace".into())
        })?;
        let api: Api<LeaseCandidate> = Api::namespaced(client, &namespace);
        let created = api.create(&PostParams::default(), &candidate).await?;
        let name = created.metadata.name.clone().unwrap_or_default();
        let task = tokio::spawn(answer_pings(api, name.clone()));
        Ok(Self {
            name,
            namespace,
            task,
        })
    }

    /// The candidate's name (what an election writes into `holderIdentity`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The candidate's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Stops answering pings (the candidate then looks dead to an election controller).
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for CandidateResponder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether `spec` has a ping that its renewal does not answer yet.
fn ping_outstanding(spec: &LeaseCandidateSpec) -> bool {
    match (&spec.ping_time, &spec.renew_time) {
        (Some(ping), Some(renew)) => ping.0 > renew.0,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

async fn answer_pings(api: Api<LeaseCandidate>, name: String) {
    loop {
        tokio::time::sleep(POLL).await;
        let mut candidate = match api.get_opt(&name).await {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, candidate = %name, "reading candidate");
                continue;
            }
        };
        let Some(spec) = candidate.spec.as_mut() else {
            continue;
        };
        if !ping_outstanding(spec) {
            continue;
        }
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        // The object carries the resourceVersion just read: a concurrent write makes this a
        // conflict, and the next poll retries.
        if let Err(error) = api.replace(&name, &PostParams::default(), &candidate).await {
            tracing::debug!(%error, candidate = %name, "answering ping");
        } else {
            tracing::debug!(candidate = %name, "answered ping");
        }
    }
}
