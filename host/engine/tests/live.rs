//! Plugins put in service, replaced and taken out while the engine runs (issue 30): what a
//! `StrategyPlugin` object and a watched plugins directory rely on. A refused plugin leaves the
//! engine serving what it served; a replaced one answers the next call; a broken new version
//! leaves the last good one in service.

use conclave_core::strategy::OLDEST_EMULATION_VERSION;
use conclave_engine::{CallError, Engine, EngineConfig, InstallError, PluginOptions, PluginSource};
use std::path::Path;

mod common;
use common::{fixture, request};

const NOBODY: &str = "(i32.const 0x120)";
const REFUSE: &str = "(i32.const 0x140)";

fn object(name: &str) -> PluginSource {
    PluginSource::Object {
        name: name.into(),
        origin: "test".into(),
    }
}

fn prepare(
    engine: &Engine,
    name: &str,
    strategy: &str,
    body: &str,
) -> conclave_engine::PreparedPlugin {
    engine
        .prepare(
            object(name),
            fixture(strategy, body).as_bytes(),
            PluginOptions::default(),
        )
        .expect("the fixture loads")
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default()).expect("the built-in plugins load")
}

#[test]
fn an_installed_plugin_serves_at_once_and_a_new_version_replaces_it() {
    let engine = engine();
    let strategy = "test/live";
    assert!(!engine.has_strategy(strategy));

    let replaced = engine
        .install(
            "strategyplugin/live",
            prepare(&engine, "live", strategy, NOBODY),
        )
        .expect("a new strategy installs");
    assert!(replaced.is_none());
    assert_eq!(engine.elect(strategy, &request(strategy)), Ok(None));
    let (info, counts) = engine.installed("strategyplugin/live").expect("in service");
    assert_eq!(info.strategies, [strategy]);
    assert_eq!((counts.decided, counts.failed), (1, 0));

    let replaced = engine
        .install(
            "strategyplugin/live",
            prepare(&engine, "live", strategy, REFUSE),
        )
        .expect("a new version replaces the old one");
    assert!(replaced.is_some(), "the old version is returned");
    let error = engine.elect(strategy, &request(strategy)).unwrap_err();
    assert!(matches!(error, CallError::PluginError { .. }), "{error}");
    let (_, counts) = engine.installed("strategyplugin/live").unwrap();
    assert_eq!(
        (counts.decided, counts.failed),
        (0, 1),
        "counts start again per version"
    );

    assert!(engine.uninstall("strategyplugin/live").is_some());
    assert!(!engine.has_strategy(strategy));
    let error = engine.elect(strategy, &request(strategy)).unwrap_err();
    assert!(
        matches!(error, CallError::UnknownStrategy { .. }),
        "{error}"
    );
}

#[test]
fn a_plugin_shadowing_a_builtin_is_refused_and_the_builtin_keeps_electing() {
    let engine = engine();
    let shadow = prepare(&engine, "shadow", OLDEST_EMULATION_VERSION, NOBODY);
    let error = engine.install("strategyplugin/shadow", shadow).unwrap_err();
    assert!(
        matches!(&error, InstallError::ShadowsBuiltin { strategy, .. } if strategy == OLDEST_EMULATION_VERSION),
        "{error}"
    );
    assert!(engine.installed("strategyplugin/shadow").is_none());
    let answer = engine.elect(OLDEST_EMULATION_VERSION, &request(OLDEST_EMULATION_VERSION));
    assert_eq!(answer.unwrap().as_deref(), Some("old"));
    // Built-ins cannot be taken out either.
    let builtin = engine.plugins()[0].source.to_string();
    assert!(engine.uninstall(&builtin).is_none());
    assert!(engine.has_strategy(OLDEST_EMULATION_VERSION));
}

#[test]
fn a_second_plugin_claiming_a_strategy_is_refused_until_the_first_is_removed() {
    let engine = engine();
    let strategy = "test/contested";
    engine
        .install(
            "strategyplugin/first",
            prepare(&engine, "first", strategy, NOBODY),
        )
        .unwrap();
    let error = engine
        .install(
            "strategyplugin/second",
            prepare(&engine, "second", strategy, REFUSE),
        )
        .unwrap_err();
    assert!(
        matches!(&error, InstallError::StrategyConflict { holder, .. } if holder.contains("strategyplugin/first")),
        "{error}"
    );
    assert_eq!(
        engine.elect(strategy, &request(strategy)),
        Ok(None),
        "the first still serves"
    );

    engine.uninstall("strategyplugin/first").unwrap();
    engine
        .install(
            "strategyplugin/second",
            prepare(&engine, "second", strategy, REFUSE),
        )
        .expect("free once the first is gone");
    assert!(engine.elect(strategy, &request(strategy)).is_err());
}

fn write(dir: &Path, file: &str, strategy: &str, body: &str) {
    std::fs::write(dir.join(format!("{file}.wasm")), fixture(strategy, body)).unwrap();
}

#[test]
fn a_watched_plugins_directory_loads_changes_keeps_the_last_good_version_and_drops_deleted_files() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a", "test/a", NOBODY);
    let engine = Engine::new(EngineConfig {
        plugins_dir: Some(dir.path().to_path_buf()),
        ..EngineConfig::default()
    })
    .expect("the directory loads");
    assert_eq!(engine.elect("test/a", &request("test/a")), Ok(None));

    let unchanged = engine.sync_plugins_dir();
    assert!(
        unchanged.loaded.is_empty() && unchanged.failed.is_empty() && unchanged.removed.is_empty(),
        "{unchanged:?}"
    );

    write(dir.path(), "a", "test/a", REFUSE);
    write(dir.path(), "b", "test/b", NOBODY);
    let sync = engine.sync_plugins_dir();
    assert_eq!(sync.loaded.len(), 2, "{sync:?}");
    assert!(
        engine.elect("test/a", &request("test/a")).is_err(),
        "the new version of a serves"
    );
    assert_eq!(engine.elect("test/b", &request("test/b")), Ok(None));

    std::fs::write(dir.path().join("a.wasm"), b"not a component").unwrap();
    let sync = engine.sync_plugins_dir();
    assert_eq!(sync.failed.len(), 1, "{sync:?}");
    assert!(
        sync.failed[0]
            .1
            .contains("not a valid WebAssembly component"),
        "{sync:?}"
    );
    assert!(
        matches!(
            engine.elect("test/a", &request("test/a")),
            Err(CallError::PluginError { .. })
        ),
        "the last good version of a still serves"
    );
    let again = engine.sync_plugins_dir();
    assert!(
        again.failed.is_empty(),
        "a refused file is not loaded again until it changes"
    );

    std::fs::remove_file(dir.path().join("a.wasm")).unwrap();
    let sync = engine.sync_plugins_dir();
    assert_eq!(sync.removed, [dir.path().join("a.wasm")], "{sync:?}");
    assert!(!engine.has_strategy("test/a"));
    assert!(engine.has_strategy("test/b"));
}

#[test]
fn a_trial_election_tells_a_plugin_that_would_fail_every_election_before_it_serves() {
    let engine = engine();
    prepare(&engine, "answers", "test/answers", NOBODY)
        .trial()
        .expect("a plugin answering nobody passes");
    let error = prepare(&engine, "refuses", "test/refuses", REFUSE)
        .trial()
        .unwrap_err();
    assert!(matches!(error, CallError::PluginError { .. }), "{error}");
    assert!(error.to_string().contains("cannot decide"), "{error}");
}
