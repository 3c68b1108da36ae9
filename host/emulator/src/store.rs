//! The object store: every object of every served resource, one global resourceVersion, a
//! bounded history of changes for watches that resume, and a broadcast of live changes.

use crate::fields;
use crate::objects::{self, meta_mut, meta_str};
use crate::resources::{NAMESPACES, RESOURCES, ResourceInfo};
use crate::selector::Filter;
use crate::status::ApiError;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Value, json};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// Store key: (resource id, namespace or "", name).
type Key = (usize, String, String);

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    /// The object was created (or started matching a watch's selector).
    Added,
    /// The object changed.
    Modified,
    /// The object was deleted (or stopped matching a watch's selector).
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and broadcast to watches.
#[derive(Debug)]
pub(crate) struct Event {
    /// resourceVersion of the change.
    pub rv: u64,
    /// Resource id.
    pub resource: usize,
    /// Namespace of the object ("" for cluster-scoped).
    pub namespace: String,
    /// Event type.
    pub kind: EventType,
    /// The object after the change (for deletes: the last state, with the deletion's version).
    pub object: Arc<Value>,
    /// The object before the change, so selector watches see objects enter and leave.
    pub prev: Option<Arc<Value>>,
    /// `object` serialised once, shared by every watch.
    pub object_json: String,
}

struct State {
    rv: u64,
    objects: BTreeMap<Key, Arc<Value>>,
    history: VecDeque<Arc<Event>>,
    /// Every change after this version is in `history`; older starting points get 410.
    compacted: u64,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WatchStart {
    /// The most recent version (resourceVersion "" or "0"): a legacy watch announces every
    /// current object as ADDED first.
    Now,
    /// Changes after this resourceVersion.
    After(u64),
}

/// What a new watch gets: objects to announce first, history to replay, and the live feed.
pub(crate) struct Subscription {
    /// Current objects to send as ADDED.
    pub initial: Vec<Value>,
    /// Kept events to replay, oldest first.
    pub replay: Vec<Arc<Event>>,
    /// Live events after `rv`.
    pub live: broadcast::Receiver<Arc<Event>>,
    /// The store's resourceVersion when the watch subscribed.
    pub rv: u64,
}

/// One page of a list: the stored objects themselves (shared with the store, never modified)
/// and the list's metadata. It serialises as kube-apiserver lists: each item without its
/// apiVersion and kind.
pub(crate) struct ListPage {
    kind: String,
    api_version: String,
    metadata: Value,
    items: Vec<Arc<Value>>,
}

impl ListPage {
    /// The page as a JSON value (a copy of every item), for the forms that rework it (Table).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

impl Serialize for ListPage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("kind", &self.kind)?;
        map.serialize_entry("apiVersion", &self.api_version)?;
        map.serialize_entry("metadata", &self.metadata)?;
        map.serialize_entry("items", &ListItems(&self.items))?;
        map.end()
    }
}

/// The items of a [`ListPage`].
struct ListItems<'a>(&'a [Arc<Value>]);

impl Serialize for ListItems<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|o| ListItem(o)))
    }
}

/// One listed object, serialised without its apiVersion and kind.
struct ListItem<'a>(&'a Value);

impl Serialize for ListItem<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) = self.0 else {
            return self.0.serialize(serializer);
        };
        let mut map = serializer.serialize_map(None)?;
        for (name, value) in fields {
            if name != "apiVersion" && name != "kind" {
                map.serialize_entry(name, value)?;
            }
        }
        map.end()
    }
}

/// Whether a write is stored, or only checked and answered as kube-apiserver answers a request
/// with `dryRun=All`: validated, conflicts and preconditions checked, the resulting object
/// returned, but nothing stored, no resourceVersion spent and no watch event sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    /// Store the change.
    Persist,
    /// Check and answer only.
    DryRun,
}

/// How an update is recorded in managedFields.
pub(crate) enum Writer<'a> {
    /// A create, PUT or non-apply PATCH by this manager.
    Update(&'a str),
    /// A server-side apply; managedFields are already computed.
    Apply,
}

/// The result of a delete.
pub(crate) enum Deleted {
    /// The object is gone; answer with a Success status.
    Gone(Value),
    /// The object is only marked for deletion (finalizers, namespaces); answer with it.
    Marked(Value),
}

/// The in-memory object store.
pub(crate) struct Store {
    state: Mutex<State>,
    events: broadcast::Sender<Arc<Event>>,
    history_capacity: usize,
}

fn key(res: usize, ns: &str, name: &str) -> Key {
    (res, ns.to_string(), name.to_string())
}

fn parse_rv(s: &str) -> Option<u64> {
    s.parse().ok()
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

impl Store {
    /// An empty store with the namespaces a fresh cluster has.
    pub fn new(history_capacity: usize) -> Self {
        let (events, _) = broadcast::channel(16 * 1024);
        let store = Self {
            state: Mutex::new(State {
                rv: 0,
                objects: BTreeMap::new(),
                history: VecDeque::new(),
                compacted: 0,
            }),
            events,
            history_capacity: history_capacity.max(1),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj =
                json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } });
            store
                .create(NAMESPACES, "", obj, "kube-apiserver", Commit::Persist)
                .expect("initial namespaces are valid");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Waits until the store's resourceVersion reaches `rv`, for at most `timeout`, as
    /// kube-apiserver's watch cache waits before a read from a version it has not seen yet.
    /// Returns the resourceVersion it ended at (below `rv` when the wait timed out).
    pub async fn wait_for(&self, rv: u64, timeout: std::time::Duration) -> u64 {
        let mut events = {
            let st = self.lock();
            if st.rv >= rv {
                return st.rv;
            }
            self.events.subscribe()
        };
        let reached = tokio::time::timeout(timeout, async {
            loop {
                match events.recv().await {
                    Ok(ev) if ev.rv >= rv => return,
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        let _ = reached.await;
        self.resource_version()
    }

    /// How many objects are stored.
    pub fn len(&self) -> usize {
        self.lock().objects.len()
    }

    /// Forgets the watch history: watches resuming from any earlier version get 410 Gone.
    pub fn expire_history(&self) {
        let mut st = self.lock();
        st.history.clear();
        st.compacted = st.rv;
    }

    fn emit(
        &self,
        st: &mut State,
        res: usize,
        ns: &str,
        kind: EventType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let object_json = object.to_string();
        let event = Arc::new(Event {
            rv: st.rv,
            resource: res,
            namespace: ns.to_string(),
            kind,
            object,
            prev,
            object_json,
        });
        st.history.push_back(event.clone());
        while st.history.len() > self.history_capacity {
            if let Some(old) = st.history.pop_front() {
                st.compacted = old.rv;
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(event);
    }

    fn check_namespace(st: &State, res: &ResourceInfo, ns: &str) -> Result<(), ApiError> {
        if res.namespaced && !st.objects.contains_key(&key(NAMESPACES, "", ns)) {
            return Err(ApiError::not_found(&RESOURCES[NAMESPACES], ns));
        }
        Ok(())
    }

    /// Reads one object.
    pub fn get(&self, res: usize, ns: &str, name: &str) -> Result<Value, ApiError> {
        self.lock()
            .objects
            .get(&key(res, ns, name))
            .map(|o| Value::clone(o))
            .ok_or_else(|| ApiError::not_found(&RESOURCES[res], name))
    }

    /// Lists objects (all namespaces when `ns` is None), with selectors and paging. Under the
    /// store's lock it only selects the objects (sharing them, not copying them); the page is
    /// serialised after, so a list of thousands of objects does not hold up every write.
    pub fn list(
        &self,
        res: usize,
        ns: Option<&str>,
        filter: &Filter,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let info = &RESOURCES[res];
        let st = self.lock();
        let (list_rv, start) = match continue_token.filter(|t| !t.is_empty()) {
            Some(token) => {
                let decoded = unhex(token).ok_or_else(|| ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
                let (rv, rest) = decoded
                    .split_once('/')
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                let (kns, kname) = rest
                    .split_once('/')
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                let rv = parse_rv(rv)
                    .ok_or_else(|| ApiError::bad_request("continue key is not valid"))?;
                (rv, Some((kns.to_string(), kname.to_string())))
            }
            None => (st.rv, None),
        };
        let lower = match &start {
            Some((kns, kname)) => std::ops::Bound::Excluded((res, kns.clone(), kname.clone())),
            None => std::ops::Bound::Included((res, ns.unwrap_or("").to_string(), String::new())),
        };
        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0usize;
        for ((r, kns, _), obj) in st.objects.range((lower, std::ops::Bound::Unbounded)) {
            if *r != res || ns.is_some_and(|n| n != kns) {
                break;
            }
            if !filter.matches(obj) {
                continue;
            }
            if limit.is_some_and(|l| l > 0 && items.len() >= l) {
                if next.is_none() {
                    let (last_ns, last_name): (String, String) = items
                        .last()
                        .map(|o: &Arc<Value>| {
                            (
                                meta_str(o, "namespace").to_string(),
                                meta_str(o, "name").to_string(),
                            )
                        })
                        .unwrap_or_default();
                    next = Some(hex(&format!("{list_rv}/{last_ns}/{last_name}")));
                }
                remaining += 1;
                continue;
            }
            items.push(Arc::clone(obj));
        }
        drop(st);
        let mut metadata = json!({ "resourceVersion": list_rv.to_string() });
        if let Some(token) = next {
            metadata["continue"] = json!(token);
            if filter.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        Ok(ListPage {
            kind: format!("{}List", info.kind),
            api_version: info.api_version(),
            metadata,
            items,
        })
    }

    /// Creates an object (already normalised). `name` comes from the body or generateName.
    pub fn create(
        &self,
        res: usize,
        ns: &str,
        mut obj: Value,
        manager: &str,
        commit: Commit,
    ) -> Result<Value, ApiError> {
        let info = &RESOURCES[res];
        let mut st = self.lock();
        Self::check_namespace(&st, info, ns)?;
        {
            let meta = meta_mut(&mut obj);
            let has_name = meta
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !has_name
                && let Some(prefix) = meta
                    .get("generateName")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
            {
                let name = format!("{prefix}{}", objects::name_suffix());
                meta.insert("name".into(), json!(name));
            }
            if info.namespaced {
                meta.insert("namespace".into(), json!(ns));
            } else {
                meta.remove("namespace");
            }
            for system in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                meta.remove(system);
            }
        }
        let name = meta_str(&obj, "name").to_string();
        if res == NAMESPACES {
            let labels = meta_mut(&mut obj)
                .entry("labels")
                .or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            obj["spec"] = json!({ "finalizers": ["kubernetes"] });
            obj["status"] = json!({ "phase": "Active" });
        }
        // As kube-apiserver's pod strategy: a new Pod's status is the server's, not the client's
        // (the kubelet writes it later through the status subresource).
        if info.status_subresource {
            obj["status"] = json!({ "phase": "Pending" });
        }
        objects::validate(res, &obj, None)?;
        let k = key(res, ns, &name);
        if st.objects.contains_key(&k) {
            return Err(ApiError::already_exists(info, &name));
        }
        let now = objects::now_rfc3339();
        let existing = obj.pointer("/metadata/managedFields").is_some();
        if !existing {
            fields::record_update(None, &mut obj, manager, &info.api_version(), &now);
        }
        {
            let meta = meta_mut(&mut obj);
            meta.insert("uid".into(), json!(objects::new_uid()));
            meta.insert("creationTimestamp".into(), json!(now));
        }
        // A dry-run create answers with the uid and creationTimestamp it would have set, and no
        // resourceVersion, as kube-apiserver does.
        if commit == Commit::DryRun {
            return Ok(obj);
        }
        st.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(st.rv.to_string()));
        let stored = Arc::new(obj.clone());
        st.objects.insert(k, stored.clone());
        self.emit(&mut st, res, ns, EventType::Added, stored, None);
        Ok(obj)
    }

    /// Writes a new version of the object stored under `k` (with `Commit::DryRun`, only answers
    /// with it), or returns the old one if nothing changed.
    fn commit_update(
        &self,
        st: &mut State,
        k: Key,
        old: &Arc<Value>,
        mut new: Value,
        writer: Writer<'_>,
        commit: Commit,
    ) -> Result<Value, ApiError> {
        let (res, ns, name) = (k.0, k.1.as_str(), k.2.as_str());
        let info = &RESOURCES[res];
        {
            let old_meta = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = meta_mut(&mut new);
            meta.insert("name".into(), json!(name));
            if info.namespaced {
                meta.insert("namespace".into(), json!(ns));
            }
            // uid and creationTimestamp may be echoed back; validation rejects changed values.
            for system in ["uid", "creationTimestamp"] {
                if !meta.contains_key(system)
                    && let Some(v) = old_meta.get(system)
                {
                    meta.insert(system.into(), v.clone());
                }
            }
            for system in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(system) {
                    Some(v) => meta.insert(system.into(), v.clone()),
                    None => meta.remove(system),
                };
            }
            meta.insert(
                "resourceVersion".into(),
                old_meta
                    .get("resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
        if res == NAMESPACES {
            new["status"] = old["status"].clone();
        }
        objects::validate(res, &new, Some(old))?;
        if let Writer::Update(manager) = writer {
            fields::record_update(
                Some(old),
                &mut new,
                manager,
                &info.api_version(),
                &objects::now_rfc3339(),
            );
        }
        if fields::comparable(&new) == fields::comparable(old) {
            return Ok(Value::clone(old));
        }
        // A dry run answers with the object it would store, still at the current resourceVersion.
        if commit == Commit::DryRun {
            return Ok(new);
        }
        st.rv += 1;
        let rv = st.rv;
        meta_mut(&mut new).insert("resourceVersion".into(), json!(rv.to_string()));
        let finalized = new.pointer("/metadata/deletionTimestamp").is_some()
            && new
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        let stored = Arc::new(new.clone());
        if finalized {
            st.objects.remove(&k);
            self.emit(st, res, ns, EventType::Deleted, stored, Some(old.clone()));
        } else {
            // Both under the lock: no reader sees the event without the stored object.
            self.emit(
                st,
                res,
                ns,
                EventType::Modified,
                stored.clone(),
                Some(old.clone()),
            );
            st.objects.insert(k, stored);
        }
        Ok(new)
    }

    /// PUT: replaces an object (creating it when the resource allows). Returns (created, object).
    pub fn replace(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        new: Value,
        manager: &str,
        commit: Commit,
    ) -> Result<(bool, Value), ApiError> {
        let info = &RESOURCES[res];
        let requested_rv = meta_str(&new, "resourceVersion").to_string();
        let old = {
            let st = self.lock();
            st.objects.get(&key(res, ns, name)).cloned()
        };
        let Some(old) = old else {
            if !info.allow_create_on_update || !requested_rv.is_empty() {
                return Err(ApiError::not_found(info, name));
            }
            return self
                .create(res, ns, new, manager, commit)
                .map(|o| (true, o));
        };
        let mut st = self.lock();
        // Re-read under the lock so the precondition is checked against the latest version.
        let old = st.objects.get(&key(res, ns, name)).cloned().unwrap_or(old);
        if requested_rv.is_empty() {
            if !info.allow_unconditional_update {
                let fe = conclave_core::validation::FieldError {
                    kind: conclave_core::validation::FieldErrorKind::Invalid,
                    path: "metadata.resourceVersion".into(),
                    value: Some("0".into()),
                    detail: "must be specified for an update".into(),
                };
                return Err(ApiError::invalid_by_registry(info, name, &[fe]));
            }
        } else if requested_rv != meta_str(&old, "resourceVersion") {
            return Err(ApiError::conflict(info, name));
        }
        self.commit_update(
            &mut st,
            key(res, ns, name),
            &old,
            new,
            Writer::Update(manager),
            commit,
        )
        .map(|o| (false, o))
    }

    /// PATCH and apply: `change` computes the new object from the current one (None if missing;
    /// only apply may create). A resourceVersion in the result is a precondition.
    pub fn modify(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        change: impl FnOnce(Option<&Value>) -> Result<(Value, Writer<'static>), ApiError>,
        manager: &str,
        commit: Commit,
    ) -> Result<(bool, Value), ApiError> {
        let info = &RESOURCES[res];
        let mut st = self.lock();
        let old = st.objects.get(&key(res, ns, name)).cloned();
        let (new, writer) = change(old.as_deref())?;
        let requested_rv = meta_str(&new, "resourceVersion").to_string();
        match old {
            None => {
                drop(st);
                if !requested_rv.is_empty() {
                    return Err(ApiError::not_found(info, name));
                }
                self.create(res, ns, new, manager, commit)
                    .map(|o| (true, o))
            }
            Some(old) => {
                if !requested_rv.is_empty() && requested_rv != meta_str(&old, "resourceVersion") {
                    return Err(ApiError::conflict(info, name));
                }
                let writer = match writer {
                    Writer::Apply => Writer::Apply,
                    Writer::Update(_) => Writer::Update(manager),
                };
                self.commit_update(&mut st, key(res, ns, name), &old, new, writer, commit)
                    .map(|o| (false, o))
            }
        }
    }

    fn remove_object(&self, st: &mut State, res: usize, ns: &str, name: &str) -> Option<Value> {
        let old = st.objects.remove(&key(res, ns, name))?;
        st.rv += 1;
        let mut last = Value::clone(&old);
        meta_mut(&mut last).insert("resourceVersion".into(), json!(st.rv.to_string()));
        self.emit(
            st,
            res,
            ns,
            EventType::Deleted,
            Arc::new(last.clone()),
            Some(old),
        );
        Some(last)
    }

    /// Deletes one object, honouring uid/resourceVersion preconditions and finalizers.
    pub fn delete(
        &self,
        res: usize,
        ns: &str,
        name: &str,
        uid: Option<&str>,
        rv: Option<&str>,
        commit: Commit,
    ) -> Result<Deleted, ApiError> {
        let info = &RESOURCES[res];
        let mut st = self.lock();
        let old = st
            .objects
            .get(&key(res, ns, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(info, name))?;
        if let Some(uid) = uid.filter(|u| *u != meta_str(&old, "uid")) {
            return Err(ApiError::precondition_failed(
                info,
                name,
                &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta_str(&old, "uid")
                ),
            ));
        }
        if let Some(rv) = rv.filter(|r| *r != meta_str(&old, "resourceVersion")) {
            return Err(ApiError::precondition_failed(
                info,
                name,
                &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    meta_str(&old, "resourceVersion")
                ),
            ));
        }
        if commit == Commit::DryRun {
            return Ok(Self::dry_run_delete(res, &old));
        }
        if res == NAMESPACES {
            let contained: Vec<(usize, String)> = st
                .objects
                .keys()
                .filter(|(r, kns, _)| *r != NAMESPACES && kns == name)
                .map(|(r, _, n)| (*r, n.clone()))
                .collect();
            for (r, n) in contained {
                self.remove_object(&mut st, r, name, &n);
            }
            let mut last = self
                .remove_object(&mut st, res, "", name)
                .unwrap_or_else(|| Value::clone(&old));
            let now = objects::now_rfc3339();
            meta_mut(&mut last).insert("deletionTimestamp".into(), json!(now));
            last["status"] = json!({ "phase": "Terminating" });
            return Ok(Deleted::Marked(last));
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(Deleted::Marked(Value::clone(&old)));
            }
            let mut marked = Value::clone(&old);
            {
                let meta = meta_mut(&mut marked);
                meta.insert("deletionTimestamp".into(), json!(objects::now_rfc3339()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            st.rv += 1;
            meta_mut(&mut marked).insert("resourceVersion".into(), json!(st.rv.to_string()));
            let stored = Arc::new(marked.clone());
            st.objects.insert(key(res, ns, name), stored.clone());
            self.emit(&mut st, res, ns, EventType::Modified, stored, Some(old));
            return Ok(Deleted::Marked(marked));
        }
        let last = self
            .remove_object(&mut st, res, ns, name)
            .unwrap_or_else(|| Value::clone(&old));
        Ok(Deleted::Gone(last))
    }

    /// What a delete of `old` answers: a namespace or an object with finalizers is marked for
    /// deletion (nothing else is written), anything else is gone.
    fn dry_run_delete(res: usize, old: &Value) -> Deleted {
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if res != NAMESPACES && !has_finalizers {
            return Deleted::Gone(old.clone());
        }
        let mut marked = old.clone();
        if marked.pointer("/metadata/deletionTimestamp").is_none() {
            let meta = meta_mut(&mut marked);
            meta.insert("deletionTimestamp".into(), json!(objects::now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        if res == NAMESPACES {
            marked["status"] = json!({ "phase": "Terminating" });
        }
        Deleted::Marked(marked)
    }

    /// Deletes every matching object; returns the list of what was deleted.
    pub fn delete_collection(
        &self,
        res: usize,
        ns: Option<&str>,
        filter: &Filter,
        commit: Commit,
    ) -> Result<Value, ApiError> {
        let info = &RESOURCES[res];
        let names: Vec<(String, String)> = {
            let st = self.lock();
            st.objects
                .iter()
                .filter(|((r, kns, _), obj)| {
                    *r == res && ns.is_none_or(|n| n == kns) && filter.matches(obj)
                })
                .map(|((_, kns, kname), _)| (kns.clone(), kname.clone()))
                .collect()
        };
        let mut items = Vec::new();
        for (kns, kname) in names {
            match self.delete(res, &kns, &kname, None, None, commit) {
                Ok(Deleted::Gone(mut o) | Deleted::Marked(mut o)) => {
                    if let Some(m) = o.as_object_mut() {
                        m.remove("apiVersion");
                        m.remove("kind");
                    }
                    items.push(o);
                }
                Err(e) if e.code.as_u16() == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": { "resourceVersion": self.resource_version().to_string() },
            "items": items,
        }))
    }

    /// Subscribes a watch. With `with_initial`, the current objects are announced first (a
    /// watch from "now" or `sendInitialEvents=true`); otherwise a watch from a version replays
    /// the kept history after it, and errors with 410 when it is older than that history.
    pub fn subscribe(
        &self,
        res: usize,
        ns: Option<&str>,
        filter: &Filter,
        start: WatchStart,
        with_initial: bool,
    ) -> Result<Subscription, ApiError> {
        let st = self.lock();
        let live = self.events.subscribe();
        let in_scope = |r: usize, kns: &str| r == res && ns.is_none_or(|n| n == kns);
        let initial = if with_initial {
            st.objects
                .iter()
                .filter(|((r, kns, _), obj)| in_scope(*r, kns) && filter.matches(obj))
                .map(|(_, o)| Value::clone(o))
                .collect()
        } else {
            Vec::new()
        };
        let replay = match start {
            WatchStart::After(from) if !with_initial => {
                if from < st.compacted {
                    return Err(ApiError::expired(from, st.compacted));
                }
                st.history.iter().filter(|e| e.rv > from).cloned().collect()
            }
            _ => Vec::new(),
        };
        Ok(Subscription {
            initial,
            replay,
            live,
            rv: st.rv,
        })
    }

    /// Whether a namespace exists.
    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.lock().objects.contains_key(&key(NAMESPACES, "", ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::LEASES;

    fn lease(name: &str) -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": name },
            "spec": { "holderIdentity": "h" },
        })
    }

    #[test]
    fn a_list_serialises_its_items_without_kind_and_leaves_the_stored_objects_whole() {
        let store = Store::new(100);
        for name in ["a", "b", "c"] {
            store
                .create(LEASES, "default", lease(name), "test", Commit::Persist)
                .unwrap();
        }
        let page = store
            .list(LEASES, Some("default"), &Filter::default(), Some(2), None)
            .unwrap();
        let listed: Value = serde_json::from_str(&serde_json::to_string(&page).unwrap()).unwrap();
        assert_eq!(page.to_value(), listed);
        assert_eq!(listed["kind"], "LeaseList");
        assert_eq!(listed["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(listed["metadata"]["remainingItemCount"], 1);
        assert!(listed["metadata"]["continue"].is_string());
        let items = listed["items"].as_array().unwrap();
        let names: Vec<&str> = items.iter().map(|o| meta_str(o, "name")).collect();
        assert_eq!(names, ["a", "b"]);
        for item in items {
            assert!(item.get("kind").is_none() && item.get("apiVersion").is_none());
            assert_eq!(item["spec"]["holderIdentity"], "h");
            assert!(item["metadata"]["resourceVersion"].is_string());
        }
        let stored = store.get(LEASES, "default", "a").unwrap();
        assert_eq!(stored["kind"], "Lease");
        assert_eq!(stored["apiVersion"], "coordination.k8s.io/v1");
    }
}
