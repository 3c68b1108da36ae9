//! `StrategyPlugin` objects (`conclave.dev/v1alpha1`): strategy plugins loaded, replaced and
//! removed while the controller runs, each with its status (issue 30).
//!
//! Every replica watches the objects and keeps the same plugins in service, so that a take-over
//! does not recompile; only the active replica writes status and Events.
//!
//! For each object a task of its own fetches the component (an OCI artifact pinned by digest, a
//! ConfigMap key in the controller's namespace, or a file under the plugins directory), verifies
//! its digest and compiles it off the election path ([`Engine::prepare`], on a blocking thread).
//! The loop that owns the objects' state then puts it in service ([`Engine::install`]): one
//! swap, so an election in flight finishes on the plugin it started with. A version that cannot
//! be loaded leaves the last good one serving (`failurePolicy: KeepLastGood`, the default) and
//! says so in `Ready`; a hung registry stalls only its own object's task, never the loop or an
//! election. Fetch failures back off; a component that is refused for what it is (invalid, a
//! forbidden import, a shadowed built-in) is tried again when its spec changes, and a strategy
//! conflict when another object goes away.
//!
//! The plugins directory (`--plugins DIR`) is synced on the same loop ([`Engine::sync_plugins_dir`]),
//! so a ConfigMap volume or an image volume updated in place reaches the controller without a
//! rollout.

use crate::context::Context;
use crate::events::Events;
use crate::leadership::Leadership;
use conclave_api::{
    FailurePolicy, PluginCondition, READY, StrategyPlugin, StrategyPluginSpec, StrategyPluginStatus,
};
use conclave_engine::{
    CallError, Engine, InstallError, LimitOverrides, LoadError, PluginOptions, PluginSource,
    PreparedPlugin,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The longest reason given in a condition's message (an Event's note is cut to 1 kB anyway).
const MESSAGE_LIMIT: usize = 900;

/// How often the loop wakes up without an event: leadership changes, due retries.
const TICK: Duration = Duration::from_secs(1);

/// The first retry after a failed fetch; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(2);

/// The longest wait between fetch retries.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What the controller needs to load `StrategyPlugin` objects.
#[derive(Clone, Debug)]
pub struct PluginObjectsConfig {
    /// The engine the controller elects with; plugins are installed into it.
    pub engine: Engine,
    /// The controller's plugins directory (`--plugins DIR`): synced every `resync`, and the root
    /// of `source.file` paths. `None`: no directory, `source.file` is refused.
    pub plugins_dir: Option<PathBuf>,
    /// The controller's namespace: where `source.configMap` and `source.oci.pullSecret` are read.
    pub namespace: String,
    /// How OCI artifacts are pulled (timeout, registries reached over plain HTTP).
    pub oci: conclave_oci::ClientOptions,
    /// How often the plugins directory, ConfigMap and file sources are read again, and the
    /// status's election counts refreshed.
    pub resync: Duration,
}

/// Why a plugin is not (or no longer) what its spec asks for: the `Ready` condition's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// The component could not be fetched (registry unreachable, timeout, unauthorized, not
    /// found, a ConfigMap or Secret missing or forbidden).
    PullFailed,
    /// The component's digest differs from the one the spec pins.
    DigestMismatch,
    /// Not a component the engine can load (not WebAssembly, not a `conclave:strategy` world,
    /// `info()` failing, too large).
    InvalidComponent,
    /// The component imports what Conclave does not provide (WASI without `--allow-wasi`).
    ImportsRefused,
    /// It claims a strategy a built-in plugin implements.
    ShadowsBuiltin,
    /// It claims a strategy another plugin implements.
    StrategyConflict,
    /// It does not implement every strategy its spec lists.
    StrategiesMissing,
    /// Its settings or limits are unusable (also: the trial election, with no candidates, came
    /// back with the plugin's own error, as a plugin that needs settings answers without them).
    SettingsInvalid,
    /// The trial election trapped (a panic, `unreachable`, an out-of-bounds access).
    TrialTrapped,
    /// The trial election ran out of its time limit (a loop that never ends).
    TrialTimedOut,
    /// The trial election ran out of its memory limit.
    TrialOutOfMemory,
    /// The source is unusable as written (no digest, a path outside the plugins directory).
    SourceInvalid,
}

impl FailureReason {
    /// The condition reason and Event reason.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::PullFailed => "PullFailed",
            Self::DigestMismatch => "DigestMismatch",
            Self::InvalidComponent => "InvalidComponent",
            Self::ImportsRefused => "ImportsRefused",
            Self::ShadowsBuiltin => "ShadowsBuiltin",
            Self::StrategyConflict => "StrategyConflict",
            Self::StrategiesMissing => "StrategiesMissing",
            Self::SettingsInvalid => "SettingsInvalid",
            Self::TrialTrapped => "TrialTrapped",
            Self::TrialTimedOut => "TrialTimedOut",
            Self::TrialOutOfMemory => "TrialOutOfMemory",
            Self::SourceInvalid => "SourceInvalid",
        }
    }

    /// Whether trying again without a change can succeed: a fetch can, a refusal of the
    /// component itself cannot (a conflict is retried when another object goes).
    const fn transient(self) -> bool {
        matches!(self, Self::PullFailed)
    }

    fn of_load_error(error: &LoadError) -> Self {
        match error {
            LoadError::ForbiddenImport { .. } => Self::ImportsRefused,
            LoadError::Sha256Mismatch { .. } => Self::DigestMismatch,
            LoadError::Sidecar { .. } | LoadError::DefaultLimits { .. } => Self::SettingsInvalid,
            _ => Self::InvalidComponent,
        }
    }

    /// Why the trial election (no candidates, no settings) failed: what the sandbox stopped,
    /// the plugin's own refusal, or an answer no election could use.
    fn of_trial_error(error: &CallError) -> Self {
        match error {
            CallError::Trap { .. } => Self::TrialTrapped,
            CallError::LimitExceeded { .. } => Self::TrialTimedOut,
            CallError::Memory { .. } => Self::TrialOutOfMemory,
            CallError::PluginError { .. } => Self::SettingsInvalid,
            CallError::UnknownStrategy { .. }
            | CallError::Instantiate { .. }
            | CallError::InvalidRequest { .. }
            | CallError::InvalidAnswer { .. } => Self::InvalidComponent,
        }
    }
}

/// A load that failed: why, in a condition reason and in words.
#[derive(Clone, Debug)]
struct Failure {
    reason: FailureReason,
    message: String,
}

impl Failure {
    fn new(reason: FailureReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// The version of a plugin in service.
#[derive(Clone, Debug)]
struct Serving {
    digest: String,
    spec: String,
    strategies: Vec<String>,
    version: String,
    contract: String,
    loaded_at: String,
}

/// What the loop knows of one object.
struct Tracked {
    object: StrategyPlugin,
    /// The spec as JSON: a change is a new version to load.
    spec: String,
    /// The spec of the last finished attempt.
    attempted: Option<String>,
    in_flight: bool,
    serving: Option<Serving>,
    /// `None` until a first attempt finished; then the failure, or none when the spec serves.
    failure: Option<Failure>,
    /// When `Ready` last changed (RFC 3339).
    since: String,
    retry_at: Option<Instant>,
    failures: u32,
    /// The status written in this term (only the active replica writes).
    written: Option<StrategyPluginStatus>,
}

/// What a load task hands back to the loop.
struct Loaded {
    name: String,
    spec: String,
    result: Result<Fetched, Failure>,
}

enum Fetched {
    /// The same component and spec as the version in service: nothing to install.
    Unchanged,
    /// A new version, compiled and checked.
    New {
        plugin: PreparedPlugin,
        digest: String,
    },
}

/// The engine key of an object's plugin.
fn key(name: &str) -> String {
    format!("strategyplugin/{name}")
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

/// What a failed watch of `StrategyPlugin` objects says, in one line: the API server's code,
/// reason and message when it answered (a missing CRD is `404 NotFound`), rather than the whole
/// `Status` object the error's own text repeats.
fn watch_error_summary(error: &watcher::Error) -> String {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => status,
        other => return other.to_string(),
    };
    format!("{} {}: {}", status.code, status.reason, status.message)
}

/// Runs until `shutdown`: watches `StrategyPlugin` objects, keeps their plugins in service in
/// `config.engine`, and, while `leadership` holds, writes their status and Events.
pub(crate) async fn run(
    ctx: Arc<Context>,
    config: PluginObjectsConfig,
    leadership: Leadership,
    shutdown: CancellationToken,
) {
    let client = ctx.client.clone();
    let api = Api::<StrategyPlugin>::all(client.clone());
    let mut watch = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let (done_tx, mut done_rx) = mpsc::channel::<Loaded>(64);
    let mut objects: BTreeMap<String, Tracked> = BTreeMap::new();
    let mut listing: Option<BTreeSet<String>> = None;
    let mut was_leading = false;
    let mut next_resync = Instant::now() + config.resync;
    let mut tick = tokio::time::interval(TICK);
    let mut missing_crd_logged = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            event = watch.next() => {
                let Some(event) = event else { break };
                match event {
                    Ok(watcher::Event::Init) => listing = Some(BTreeSet::new()),
                    Ok(watcher::Event::InitApply(object)) => {
                        if let Some(names) = listing.as_mut() {
                            names.insert(object.name_any());
                        }
                        upsert(&mut objects, object);
                    }
                    Ok(watcher::Event::InitDone) => {
                        let names = listing.take().unwrap_or_default();
                        let gone: Vec<String> =
                            objects.keys().filter(|n| !names.contains(*n)).cloned().collect();
                        for name in gone {
                            remove(&ctx, &config.engine, &mut objects, &name);
                        }
                        missing_crd_logged = false;
                    }
                    Ok(watcher::Event::Apply(object)) => upsert(&mut objects, object),
                    Ok(watcher::Event::Delete(object)) => {
                        remove(&ctx, &config.engine, &mut objects, &object.name_any());
                    }
                    Err(error) => {
                        if !missing_crd_logged {
                            tracing::warn!(
                                error = %watch_error_summary(&error),
                                "cannot watch StrategyPlugin objects (is the CRD installed? \
                                 `conclave crd | kubectl apply -f -`); retrying with backoff; \
                                 plugins from --plugins keep serving"
                            );
                            missing_crd_logged = true;
                        }
                    }
                }
            }
            Some(loaded) = done_rx.recv() => {
                finish(&ctx, &config, &mut objects, loaded);
            }
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        let resync = now >= next_resync;
        if resync {
            next_resync = now + config.resync;
            sync_dir(&ctx, &config.engine).await;
        }
        let leading = leadership.is_leading();
        if leading && !was_leading {
            // A new term: this replica's Events and status were not written yet.
            for tracked in objects.values_mut() {
                tracked.written = None;
            }
        }
        was_leading = leading;
        start_due(&client, &config, &mut objects, &done_tx, now, resync);
        if leading {
            write_statuses(&api, &config.engine, &ctx.events, &mut objects, resync).await;
        }
        ctx.metrics.set_plugin_objects(
            objects
                .values()
                .filter(|t| t.failure.is_none() && t.serving.is_some())
                .count(),
            objects.values().filter(|t| t.failure.is_some()).count(),
        );
    }
}

fn upsert(objects: &mut BTreeMap<String, Tracked>, object: StrategyPlugin) {
    let name = object.name_any();
    let spec = serde_json::to_string(&object.spec).unwrap_or_default();
    match objects.get_mut(&name) {
        Some(tracked) => {
            tracked.object = object;
            if tracked.spec != spec {
                tracked.spec = spec;
                tracked.retry_at = None;
                tracked.failures = 0;
            }
        }
        None => {
            objects.insert(
                name,
                Tracked {
                    object,
                    spec,
                    attempted: None,
                    in_flight: false,
                    serving: None,
                    failure: None,
                    since: now_rfc3339(),
                    retry_at: None,
                    failures: 0,
                    written: None,
                },
            );
        }
    }
}

/// Takes a deleted object's plugin out of service, and lets the objects refused for a strategy
/// conflict try again.
fn remove(ctx: &Context, engine: &Engine, objects: &mut BTreeMap<String, Tracked>, name: &str) {
    if objects.remove(name).is_none() {
        return;
    }
    if let Some(info) = engine.uninstall(&key(name)) {
        tracing::info!(plugin = name, strategies = ?info.strategies, "StrategyPlugin deleted: its plugin is out of service");
        ctx.enqueue_all();
    }
    for tracked in objects.values_mut() {
        if tracked
            .failure
            .as_ref()
            .is_some_and(|f| f.reason == FailureReason::StrategyConflict)
        {
            tracked.attempted = None;
        }
    }
}

/// Starts a load task for each object that needs one: a new spec, a due retry, or (at a
/// resync) a ConfigMap or file source whose content may have changed.
fn start_due(
    client: &Client,
    config: &PluginObjectsConfig,
    objects: &mut BTreeMap<String, Tracked>,
    done: &mpsc::Sender<Loaded>,
    now: Instant,
    resync: bool,
) {
    for (name, tracked) in objects.iter_mut() {
        if tracked.in_flight {
            continue;
        }
        let new_spec = tracked.attempted.as_deref() != Some(tracked.spec.as_str());
        let retry = tracked.retry_at.is_some_and(|at| at <= now);
        let reread = resync && tracked.object.spec.source.oci.is_none();
        if !(new_spec || retry || reread) {
            continue;
        }
        tracked.in_flight = true;
        tracked.retry_at = None;
        let job = Job {
            name: name.clone(),
            spec: tracked.object.spec.clone(),
            spec_json: tracked.spec.clone(),
            serving: tracked
                .serving
                .as_ref()
                .map(|s| (s.digest.clone(), s.spec.clone())),
        };
        let client = client.clone();
        let config = config.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let loaded = job.run(&client, &config).await;
            // The loop is gone only at shutdown.
            let _ = done.send(loaded).await;
        });
    }
}

/// One load: fetch, verify, compile.
struct Job {
    name: String,
    spec: StrategyPluginSpec,
    spec_json: String,
    /// The digest and spec of the version in service.
    serving: Option<(String, String)>,
}

impl Job {
    async fn run(self, client: &Client, config: &PluginObjectsConfig) -> Loaded {
        let result = self.load(client, config).await;
        Loaded {
            name: self.name,
            spec: self.spec_json,
            result,
        }
    }

    async fn load(
        &self,
        client: &Client,
        config: &PluginObjectsConfig,
    ) -> Result<Fetched, Failure> {
        let (bytes, origin, pinned) = fetch(client, config, &self.spec).await?;
        let digest = sha256_hex(&bytes);
        if let Some(pinned) = pinned
            && !pinned.eq_ignore_ascii_case(&digest)
        {
            return Err(Failure::new(
                FailureReason::DigestMismatch,
                format!("{origin}: the component's sha256 is {digest}, the spec pins {pinned}"),
            ));
        }
        if self
            .serving
            .as_ref()
            .is_some_and(|(d, s)| *d == digest && *s == self.spec_json)
        {
            return Ok(Fetched::Unchanged);
        }
        let options = PluginOptions {
            settings: self.spec.settings.clone(),
            limits: self.spec.limits.map(|l| LimitOverrides {
                time_ms: l.time_ms.and_then(|ms| u64::try_from(ms).ok()),
                memory_bytes: l.memory_bytes.and_then(|b| usize::try_from(b).ok()),
                ..LimitOverrides::default()
            }),
            sha256: None,
        };
        let source = PluginSource::Object {
            name: self.name.clone(),
            origin,
        };
        let engine = config.engine.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            let prepared = engine.prepare(source, &bytes, options).map_err(|error| {
                Failure::new(FailureReason::of_load_error(&error), error_chain(&error))
            })?;
            prepared.trial().map_err(|error| {
                Failure::new(
                    FailureReason::of_trial_error(&error),
                    format!(
                        "a trial election with no candidates failed, so every election would: \
                         {error}"
                    ),
                )
            })?;
            Ok(prepared)
        })
        .await
        .map_err(|error| {
            Failure::new(
                FailureReason::InvalidComponent,
                format!("loading panicked: {error}"),
            )
        })??;
        let info = prepared.info();
        let missing: Vec<&String> = self
            .spec
            .strategies
            .iter()
            .filter(|s| !info.strategies.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(Failure::new(
                FailureReason::StrategiesMissing,
                format!(
                    "the plugin implements {:?}, not {missing:?} as the spec requires",
                    info.strategies
                ),
            ));
        }
        Ok(Fetched::New {
            plugin: prepared,
            digest,
        })
    }
}

/// An error and its causes, in one line (a cause may print a multi-line dump), at most
/// [`MESSAGE_LIMIT`] bytes.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    conclave_core::text::truncate_utf8(&mut text, MESSAGE_LIMIT);
    text
}

/// The component's bytes, where they came from (for logs and status), and the digest the spec
/// pins, if any.
async fn fetch(
    client: &Client,
    config: &PluginObjectsConfig,
    spec: &StrategyPluginSpec,
) -> Result<(Vec<u8>, String, Option<String>), Failure> {
    let source = &spec.source;
    match (&source.oci, &source.config_map, &source.file) {
        (Some(oci), None, None) => {
            let reference = conclave_oci::Reference::parse(&oci.reference)
                .map_err(|e| Failure::new(FailureReason::SourceInvalid, e.to_string()))?;
            if !reference.is_pinned() {
                return Err(Failure::new(
                    FailureReason::SourceInvalid,
                    format!("{} is not pinned by digest (…@sha256:…)", oci.reference),
                ));
            }
            let credentials = match &oci.pull_secret {
                None => conclave_oci::Credentials::Anonymous,
                Some(secret) => pull_credentials(client, config, secret, &reference).await?,
            };
            let pulled = conclave_oci::pull(&reference, &credentials, &config.oci)
                .await
                .map_err(|error| {
                    let reason = match error.reason() {
                        "DigestMismatch" => FailureReason::DigestMismatch,
                        "InvalidComponent" => FailureReason::InvalidComponent,
                        "InvalidReference" => FailureReason::SourceInvalid,
                        _ => FailureReason::PullFailed,
                    };
                    Failure::new(
                        reason,
                        format!("{}: {}", oci.reference, error_chain(&error)),
                    )
                })?;
            Ok((pulled.component, oci.reference.clone(), None))
        }
        (None, Some(map), None) => {
            let origin = format!(
                "configmap {}/{} key {}",
                config.namespace, map.name, map.key
            );
            let api = Api::<ConfigMap>::namespaced(client.clone(), &config.namespace);
            let found = api.get_opt(&map.name).await.map_err(|error| {
                Failure::new(FailureReason::PullFailed, format!("{origin}: {error}"))
            })?;
            let bytes = found
                .and_then(|cm| cm.binary_data)
                .and_then(|mut data| data.remove(&map.key))
                .ok_or_else(|| {
                    Failure::new(
                        FailureReason::PullFailed,
                        format!("{origin}: no such ConfigMap or binaryData key"),
                    )
                })?;
            Ok((bytes.0, origin, map.sha256.clone()))
        }
        (None, None, Some(file)) => {
            let Some(dir) = &config.plugins_dir else {
                return Err(Failure::new(
                    FailureReason::SourceInvalid,
                    "source.file needs the controller's --plugins DIR, which is not set",
                ));
            };
            let relative = Path::new(&file.path);
            if relative.as_os_str().is_empty()
                || !relative
                    .components()
                    .all(|c| matches!(c, Component::Normal(_)))
            {
                return Err(Failure::new(
                    FailureReason::SourceInvalid,
                    format!(
                        "{:?} is not a relative path inside the plugins directory",
                        file.path
                    ),
                ));
            }
            let path = dir.join(relative);
            let bytes = tokio::fs::read(&path).await.map_err(|error| {
                Failure::new(
                    FailureReason::PullFailed,
                    format!("{}: {error}", path.display()),
                )
            })?;
            Ok((bytes, path.display().to_string(), file.sha256.clone()))
        }
        _ => Err(Failure::new(
            FailureReason::SourceInvalid,
            "exactly one of source.oci, source.configMap and source.file must be set",
        )),
    }
}

/// The credentials for `reference`'s registry in the `kubernetes.io/dockerconfigjson` Secret
/// `secret` of the controller's namespace.
async fn pull_credentials(
    client: &Client,
    config: &PluginObjectsConfig,
    secret: &str,
    reference: &conclave_oci::Reference,
) -> Result<conclave_oci::Credentials, Failure> {
    let origin = format!("pull secret {}/{secret}", config.namespace);
    let api = Api::<Secret>::namespaced(client.clone(), &config.namespace);
    let found = api
        .get_opt(secret)
        .await
        .map_err(|error| Failure::new(FailureReason::PullFailed, format!("{origin}: {error}")))?
        .ok_or_else(|| Failure::new(FailureReason::PullFailed, format!("{origin}: not found")))?;
    let json = found
        .data
        .and_then(|mut data| data.remove(".dockerconfigjson"))
        .ok_or_else(|| {
            Failure::new(
                FailureReason::PullFailed,
                format!("{origin}: no .dockerconfigjson key (type kubernetes.io/dockerconfigjson)"),
            )
        })?;
    conclave_oci::Credentials::from_docker_config(&json.0, reference.registry())
        .map_err(|error| Failure::new(FailureReason::PullFailed, format!("{origin}: {error}")))
}

/// Applies a finished load: installs a new version, or records why it failed.
fn finish(
    ctx: &Context,
    config: &PluginObjectsConfig,
    objects: &mut BTreeMap<String, Tracked>,
    loaded: Loaded,
) {
    let Some(tracked) = objects.get_mut(&loaded.name) else {
        // Deleted while loading.
        return;
    };
    tracked.in_flight = false;
    tracked.attempted = Some(loaded.spec.clone());
    let outcome = match loaded.result {
        Ok(Fetched::Unchanged) => Ok(None),
        Ok(Fetched::New { plugin, digest }) => {
            let info = plugin.info();
            match config.engine.install(&key(&loaded.name), plugin) {
                Ok(_) => Ok(Some(Serving {
                    digest,
                    spec: loaded.spec.clone(),
                    strategies: info.strategies.clone(),
                    version: info.version.clone(),
                    contract: info.contract.to_owned(),
                    loaded_at: now_rfc3339(),
                })),
                Err(error) => Err(Failure::new(
                    match error {
                        InstallError::ShadowsBuiltin { .. } | InstallError::BuiltinKey { .. } => {
                            FailureReason::ShadowsBuiltin
                        }
                        InstallError::StrategyConflict { .. } => FailureReason::StrategyConflict,
                    },
                    error.to_string(),
                )),
            }
        }
        Err(failure) => Err(failure),
    };
    let was_ready = tracked.failure.is_none() && tracked.attempted.is_some();
    match outcome {
        Ok(new) => {
            tracked.failures = 0;
            let changed = tracked.failure.is_some() || new.is_some();
            tracked.failure = None;
            if let Some(serving) = new {
                tracing::info!(
                    plugin = %loaded.name,
                    digest = %serving.digest,
                    strategies = ?serving.strategies,
                    "StrategyPlugin loaded and in service"
                );
                tracked.serving = Some(serving);
                ctx.enqueue_all();
            }
            if changed || !was_ready {
                tracked.since = now_rfc3339();
            }
        }
        Err(mut failure) => {
            tracked.failures = tracked.failures.saturating_add(1);
            if failure.reason.transient() {
                let backoff = FIRST_BACKOFF
                    .saturating_mul(1 << tracked.failures.min(8).saturating_sub(1))
                    .min(MAX_BACKOFF);
                tracked.retry_at = Some(Instant::now() + backoff);
            }
            if tracked.object.spec.failure_policy == FailurePolicy::Unload
                && tracked.serving.take().is_some()
            {
                config.engine.uninstall(&key(&loaded.name));
                ctx.enqueue_all();
                failure
                    .message
                    .push_str("; the plugin is out of service (failurePolicy Unload)");
            } else if let Some(serving) = &tracked.serving {
                failure.message.push_str(&format!(
                    "; the last good version sha256:{} keeps serving",
                    serving.digest
                ));
            }
            tracing::warn!(
                plugin = %loaded.name,
                reason = failure.reason.label(),
                message = %failure.message,
                "StrategyPlugin not loaded"
            );
            ctx.metrics.plugin_load_failed(failure.reason.label());
            let same = tracked
                .failure
                .as_ref()
                .is_some_and(|f| f.reason == failure.reason && f.message == failure.message);
            if !same {
                tracked.since = now_rfc3339();
            }
            tracked.failure = Some(failure);
        }
    }
}

fn object_reference(object: &StrategyPlugin) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{}/v1alpha1", conclave_api::GROUP)),
        kind: Some("StrategyPlugin".into()),
        name: Some(object.name_any()),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

fn publish(
    events: &Events,
    reference: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    events.publish_object(
        reference.clone(),
        Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Load".into(),
            secondary: None,
        },
    );
}

/// The status `tracked` should have now.
fn status_of(engine: &Engine, name: &str, tracked: &Tracked) -> Option<StrategyPluginStatus> {
    if tracked.attempted.is_none() && tracked.failure.is_none() {
        return None;
    }
    let generation = tracked.object.metadata.generation;
    let (status, reason, message) = match &tracked.failure {
        None => (
            "True",
            "Loaded",
            tracked.serving.as_ref().map_or_else(String::new, |s| {
                format!("sha256:{} serves {}", s.digest, s.strategies.join(", "))
            }),
        ),
        Some(failure) => ("False", failure.reason.label(), failure.message.clone()),
    };
    let counts = engine
        .installed(&key(name))
        .map(|(_, c)| c)
        .unwrap_or_default();
    let serving = tracked.serving.as_ref();
    Some(StrategyPluginStatus {
        observed_generation: generation,
        conditions: vec![PluginCondition {
            type_: READY.into(),
            status: status.into(),
            reason: reason.into(),
            message,
            last_transition_time: tracked.since.clone(),
            observed_generation: generation,
        }],
        digest: serving.map(|s| format!("sha256:{}", s.digest)),
        strategies: serving.map(|s| s.strategies.clone()).unwrap_or_default(),
        version: serving.map(|s| s.version.clone()),
        contract: serving.map(|s| s.contract.clone()),
        loaded_at: serving.map(|s| s.loaded_at.clone()),
        decided: i64::try_from(counts.decided).unwrap_or(i64::MAX),
        failed: i64::try_from(counts.failed).unwrap_or(i64::MAX),
    })
}

/// Writes each object's status when it changed (its counts only at a resync). A `Ready` that
/// differs from the one the object shows gets an Event too (Normal `Loaded`, or a Warning with
/// the reason): the replica that reports a change reports it once, whichever replica loaded
/// it first.
async fn write_statuses(
    api: &Api<StrategyPlugin>,
    engine: &Engine,
    events: &Events,
    objects: &mut BTreeMap<String, Tracked>,
    resync: bool,
) {
    for (name, tracked) in objects.iter_mut() {
        let Some(status) = status_of(engine, name, tracked) else {
            continue;
        };
        let due = match &tracked.written {
            None => true,
            Some(written) => {
                let counts_only = StrategyPluginStatus {
                    decided: status.decided,
                    failed: status.failed,
                    ..written.clone()
                } == status;
                if counts_only {
                    resync && (written.decided, written.failed) != (status.decided, status.failed)
                } else {
                    true
                }
            }
        };
        if !due {
            continue;
        }
        let patch = serde_json::json!({ "status": status });
        match api
            .patch_status(
                name,
                &PatchParams {
                    field_manager: Some(crate::writer::FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                let shown = tracked
                    .object
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == READY));
                let ready = &status.conditions[0];
                if shown.is_none_or(|c| {
                    (&c.status, &c.reason, &c.message)
                        != (&ready.status, &ready.reason, &ready.message)
                }) {
                    let type_ = if ready.status == "True" {
                        EventType::Normal
                    } else {
                        EventType::Warning
                    };
                    publish(
                        events,
                        &object_reference(&tracked.object),
                        type_,
                        &ready.reason,
                        ready.message.clone(),
                    );
                }
                tracked.written = Some(status);
            }
            Err(error) => {
                tracing::warn!(plugin = %name, %error, "cannot write the StrategyPlugin's status; retrying");
            }
        }
    }
}

/// Syncs the plugins directory on a blocking thread and logs what changed.
async fn sync_dir(ctx: &Context, engine: &Engine) {
    let engine = engine.clone();
    let Ok(sync) = tokio::task::spawn_blocking(move || engine.sync_plugins_dir()).await else {
        return;
    };
    for file in &sync.loaded {
        tracing::info!(file = %file.display(), "plugins directory: loaded a new or changed plugin");
    }
    for file in &sync.removed {
        tracing::info!(file = %file.display(), "plugins directory: file gone, its plugin is out of service");
    }
    for (file, error) in &sync.failed {
        tracing::warn!(file = %file.display(), %error, "plugins directory: cannot load; the last good version (if any) keeps serving");
        ctx.metrics.plugin_load_failed("PluginsDir");
    }
    if !sync.loaded.is_empty() || !sync.removed.is_empty() {
        ctx.enqueue_all();
    }
}

#[cfg(test)]
mod tests {
    use super::watch_error_summary;
    use kube::core::Status;
    use kube::runtime::watcher;

    #[test]
    fn a_missing_crd_is_logged_as_the_servers_one_line_answer() {
        let status = Status::failure(
            "the server could not find the requested resource",
            "NotFound",
        )
        .with_code(404)
        .boxed();
        let error = watcher::Error::InitialListFailed(kube::Error::Api(status));
        let summary = watch_error_summary(&error);
        assert_eq!(
            summary,
            "404 NotFound: the server could not find the requested resource"
        );
        assert!(
            error.to_string().len() > summary.len(),
            "the summary is shorter than the error's own text"
        );
        let other = watcher::Error::NoResourceVersion;
        assert_eq!(watch_error_summary(&other), other.to_string());
    }
}
