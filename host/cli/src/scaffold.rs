//! `conclave strategy new`: scaffolds a strategy plugin crate that builds and tests at once.
//!
//! The crate is its own cargo workspace (so it builds wherever it is created), depends on the
//! `conclave-strategy` SDK, exports its strategy with `export_strategy!`, and ships a vectors file
//! that `conclave strategy test` runs. Inside a Conclave checkout the SDK is a path dependency (and
//! the checkout's `strategies/Cargo.lock` pins the same dependency versions Conclave's own plugins
//! are built with); elsewhere the SDK this binary was built with is written beside the crate
//! (`conclave-sdk/`, with its lockfile and the authoring guide), so the crate builds at once,
//! offline, wherever the `conclave` binary runs.

use anyhow::{Context as _, bail};
use clap::Args;
use conclave_core::strategy::{MINIMUM_COMPATIBILITY_VERSION, OLDEST_EMULATION_VERSION};
use conclave_core::validation::validate_strategy;
use std::path::{Component, Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/bundled_sdk.rs"));

/// Where a crate created outside a Conclave checkout gets the bundled SDK, relative to the crate.
const BUNDLED_SDK_DIR: &str = "conclave-sdk";

/// Arguments of `conclave strategy new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The crate (package) name, e.g. `my-strategy`; also the directory created, unless `--dir`.
    pub name: String,
    /// The strategy name the plugin answers to, domain-prefixed as Kubernetes requires for
    /// anything but OldestEmulationVersion, e.g. `example.com/my-strategy`.
    #[arg(long)]
    pub strategy: String,
    /// The directory to create (default: `./NAME`). It must not exist, or be empty.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The SDK crate (`strategies/sdk` of a Conclave checkout) to depend on by path. By default
    /// the checkout containing the new crate (or the current directory) is used, and failing that
    /// the SDK bundled in this binary is written into the crate's `conclave-sdk/` directory.
    /// Rust only.
    #[arg(long)]
    pub sdk: Option<PathBuf>,
    /// The language to write the plugin in: a Rust crate on the SDK, or a project for the
    /// component toolchain of Python (componentize-py) or JavaScript (componentize-js).
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
}

/// A language `conclave strategy new` scaffolds a plugin in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A crate on the conclave-strategy SDK (no_std, WASI-free).
    Rust,
    /// A componentize-py 0.25.1 project, built WASI-free with `--stub-wasi`.
    Python,
    /// A componentize-js 0.23.0 project, built WASI-free.
    Javascript,
}

/// A file of a Python or JavaScript project: its path in the project (with `{{name}}` and
/// `{{lib}}` standing for the project's name and component stem) and its template.
type TemplateFile = (&'static str, &'static str);

/// The vectors both interpreter templates start with (seven cases, one of 150 candidates).
const TEMPLATE_VECTORS: &str = include_str!("../templates/vectors.json");
/// The sidecar with the limits an interpreter plugin needs.
const TEMPLATE_SIDECAR: &str = include_str!("../templates/sidecar.json");

const PYTHON_FILES: [TemplateFile; 6] = [
    ("app.py", include_str!("../templates/python/app.py")),
    (
        "requirements.txt",
        include_str!("../templates/python/requirements.txt"),
    ),
    ("README.md", include_str!("../templates/python/README.md")),
    (".gitignore", include_str!("../templates/python/gitignore")),
    ("vectors/{{name}}.json", TEMPLATE_VECTORS),
    ("{{lib}}.json", TEMPLATE_SIDECAR),
];

const JAVASCRIPT_FILES: [TemplateFile; 6] = [
    ("app.js", include_str!("../templates/javascript/app.js")),
    (
        "package.json",
        include_str!("../templates/javascript/package.json"),
    ),
    (
        "README.md",
        include_str!("../templates/javascript/README.md"),
    ),
    (
        ".gitignore",
        include_str!("../templates/javascript/gitignore"),
    ),
    ("vectors/{{name}}.json", TEMPLATE_VECTORS),
    ("{{lib}}.json", TEMPLATE_SIDECAR),
];

/// Writes a Python or JavaScript project into `dir` (which must not exist or be empty): the
/// language's files with the placeholders filled in, and the contract in `wit/strategy.wit`.
fn scaffold_interpreted(lang: Lang, name: &str, strategy: &str, dir: &Path) -> anyhow::Result<()> {
    validate_name(name)?;
    validate_strategy_name(strategy)?;
    refuse_non_empty(dir)?;
    let lib = name.replace('-', "_");
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{strategy}}", strategy)
    };
    let files = match lang {
        Lang::Python => &PYTHON_FILES,
        Lang::Javascript => &JAVASCRIPT_FILES,
        Lang::Rust => bail!("the Rust scaffold is not a template project"),
    };
    let wit = BUNDLED_SDK
        .iter()
        .find(|(path, _)| *path == "wit/strategy.wit")
        .map(|(_, contents)| *contents)
        .context("this binary bundles no wit/strategy.wit")?;
    let all = files
        .iter()
        .map(|(path, template)| (fill(path), fill(template)))
        .chain(std::iter::once((
            "wit/strategy.wit".to_owned(),
            wit.to_owned(),
        )));
    for (path, contents) in all {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// Refuses `dir` unless it does not exist or is an empty directory.
fn refuse_non_empty(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        let empty = dir.is_dir()
            && std::fs::read_dir(dir)
                .with_context(|| format!("cannot read {}", dir.display()))?
                .next()
                .is_none();
        if !empty {
            bail!(
                "{} already exists and is not an empty directory; choose another NAME or --dir",
                dir.display()
            );
        }
    }
    Ok(())
}

/// Prints what `new` created for a Python or JavaScript project and how to build and test it.
fn print_interpreted(lang: Lang, name: &str, strategy: &str, dir: &Path) {
    let lib = name.replace('-', "_");
    let toolchain = match lang {
        Lang::Python => "Python, componentize-py 0.25.1",
        _ => "JavaScript, componentize-js 0.23.0",
    };
    println!(
        "created {} ({toolchain}) for strategy {strategy}",
        dir.display()
    );
    println!("next:");
    println!("  cd {}", dir.display());
    if lang == Lang::Python {
        println!("  python3 -m venv .venv && .venv/bin/pip install -r requirements.txt");
        println!("  .venv/bin/componentize-py -d wit -w strategy bindings .");
        println!(
            "  .venv/bin/componentize-py -d wit -w strategy componentize --stub-wasi app -o {lib}.wasm"
        );
    } else {
        println!("  npm install");
        println!("  npm run build");
    }
    println!("  conclave strategy test {lib}.wasm --vectors vectors/{name}.json");
}

/// Creates the crate; prints what it created and how to build and test it.
pub fn run(args: &NewArgs) -> anyhow::Result<()> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if args.lang != Lang::Rust {
        if args.sdk.is_some() {
            bail!("--sdk applies to --lang rust only");
        }
        scaffold_interpreted(args.lang, &args.name, &args.strategy, &dir)?;
        print_interpreted(args.lang, &args.name, &args.strategy, &dir);
        return Ok(());
    }
    let sdk = match &args.sdk {
        Some(path) => {
            let path = path
                .canonicalize()
                .with_context(|| format!("--sdk {} does not exist", path.display()))?;
            if !is_sdk(&path) {
                bail!(
                    "--sdk {} is not the conclave-strategy crate (expected the strategies/sdk \
                     directory of a Conclave checkout)",
                    path.display()
                );
            }
            Some(path)
        }
        None => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            find_sdk(&cwd.join(&dir)).or_else(|| find_sdk(&cwd))
        }
    };
    let created = scaffold(&args.name, &args.strategy, &dir, sdk.as_deref())?;
    let lib = args.name.replace('-', "_");
    println!(
        "created {} ({}) for strategy {}",
        dir.display(),
        match &created {
            Sdk::Path(path) => format!("SDK by path: {}", path.display()),
            Sdk::Bundled => format!(
                "SDK bundled in {}/{BUNDLED_SDK_DIR}, with the authoring guide in \
                 {BUNDLED_SDK_DIR}/docs/strategy-authoring.md",
                dir.display()
            ),
        },
        args.strategy
    );
    println!("next:");
    println!("  cd {}", dir.display());
    println!("  cargo build --target wasm32-wasip2 --release");
    println!(
        "  conclave strategy test target/wasm32-wasip2/release/{lib}.wasm --vectors vectors/{}.json",
        args.name
    );
    Ok(())
}

/// How the new crate depends on the SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sdk {
    /// A path dependency: relative to the new crate inside the SDK's checkout, else absolute.
    Path(PathBuf),
    /// A path dependency on the SDK bundled in this binary, written into [`BUNDLED_SDK_DIR`].
    Bundled,
}

/// Writes the crate into `dir`, which must not exist or be empty, depending on the SDK in
/// `sdk_dir` by path, or on the bundled SDK when `None`.
fn scaffold(name: &str, strategy: &str, dir: &Path, sdk_dir: Option<&Path>) -> anyhow::Result<Sdk> {
    validate_name(name)?;
    validate_strategy_name(strategy)?;
    refuse_non_empty(dir)?;
    std::fs::create_dir_all(dir.join("src"))
        .and_then(|()| std::fs::create_dir_all(dir.join("vectors")))
        .and_then(|()| std::fs::create_dir_all(dir.join(".cargo")))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    let crate_dir = dir
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", dir.display()))?;

    let dependency = match sdk_dir {
        // Relative inside the checkout (so it can be committed there), absolute outside it.
        Some(sdk_dir) => match sdk_dir.ancestors().nth(2) {
            Some(checkout) if crate_dir.starts_with(checkout) => {
                Sdk::Path(relative_path(&crate_dir, sdk_dir))
            }
            _ => Sdk::Path(sdk_dir.to_path_buf()),
        },
        None => Sdk::Bundled,
    };

    let files = [
        ("Cargo.toml", cargo_toml(name, strategy, &dependency)),
        ("src/lib.rs", lib_rs(name, strategy)),
        (&format!("vectors/{name}.json"), vectors(strategy)),
        ("README.md", readme(name, strategy)),
        (".gitignore", "/target\n".to_owned()),
        // An enclosing directory's cargo config (Conclave's `strategies/` has one) must not move
        // the build output away from the `target/` the printed commands and the README name.
        (
            ".cargo/config.toml",
            "# Build into this crate's own target/ (where README.md looks for the component), even\n\
             # when an enclosing directory's cargo config sets another target directory.\n\
             [build]\n\
             target-dir = \"target\"\n\
             \n\
             # A 64 KiB stack instead of wasm-ld's 1 MiB: every election resets the plugin's memory,\n\
             # whose cost grows with its initial size. Raise it if the rule recurses deeply.\n\
             [target.wasm32-wasip2]\n\
             rustflags = [\"-C\", \"link-arg=-zstack-size=65536\"]\n"
                .to_owned(),
        ),
    ];
    for (path, contents) in files {
        let path = dir.join(path);
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if dependency == Sdk::Bundled {
        write_bundled_sdk(dir)?;
    }
    // Pin the dependency versions Conclave's own plugins are built and tested with.
    if let Some(lock) = sdk_dir
        .and_then(Path::parent)
        .map(|strategies| strategies.join("Cargo.lock"))
        .filter(|lock| lock.is_file())
    {
        std::fs::copy(&lock, dir.join("Cargo.lock"))
            .with_context(|| format!("cannot copy {}", lock.display()))?;
    }
    Ok(dependency)
}

/// Writes the bundled SDK into `dir/conclave-sdk`, and its lockfile (the versions Conclave's own
/// plugins are built with) as the crate's.
fn write_bundled_sdk(dir: &Path) -> anyhow::Result<()> {
    for (path, contents) in BUNDLED_SDK {
        let target = if *path == "Cargo.lock" {
            dir.join(path)
        } else {
            dir.join(BUNDLED_SDK_DIR).join(path)
        };
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&target, contents)
            .with_context(|| format!("cannot write {}", target.display()))?;
    }
    Ok(())
}

/// A cargo package name: lowercase ASCII letters, digits, `-` and `_`, starting with a letter.
fn validate_name(name: &str) -> anyhow::Result<()> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        bail!(
            "invalid crate name {name:?}: use 1 to 64 lowercase letters, digits, '-' or '_', \
             starting with a letter (e.g. my-strategy)"
        );
    }
    Ok(())
}

/// A strategy name Kubernetes accepts for a third-party strategy: `DOMAIN/NAME`.
fn validate_strategy_name(strategy: &str) -> anyhow::Result<()> {
    if strategy == OLDEST_EMULATION_VERSION || strategy == MINIMUM_COMPATIBILITY_VERSION {
        bail!("{strategy} is Conclave's built-in strategy; name yours DOMAIN/NAME");
    }
    if !strategy.contains('/') {
        bail!(
            "invalid strategy {strategy:?}: Kubernetes accepts only domain-prefixed names for \
             strategies other than OldestEmulationVersion; use DOMAIN/NAME, e.g. example.com/{strategy}"
        );
    }
    let errors = validate_strategy(strategy, "spec");
    if let Some(error) = errors.first() {
        bail!("invalid strategy {strategy:?}: {}", error.message());
    }
    Ok(())
}

/// Whether `dir` holds the `conclave-strategy` crate.
fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .is_ok_and(|manifest| manifest.contains("name = \"conclave-strategy\""))
}

/// The SDK of the Conclave checkout containing `start` (which need not exist yet), canonical.
fn find_sdk(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|dir| dir.join("strategies").join("sdk"))
        .find(|sdk| is_sdk(sdk))
        .and_then(|sdk| sdk.canonicalize().ok())
}

/// `to` relative to `from`; both absolute and canonical.
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path = PathBuf::new();
    for _ in common..from.len() {
        path.push("..");
    }
    for component in &to[common..] {
        path.push(component);
    }
    path
}

fn cargo_toml(name: &str, strategy: &str, sdk: &Sdk) -> String {
    let dependency = match sdk {
        Sdk::Path(path) => format!(
            "conclave-strategy = {{ path = {} }}",
            toml_string(&path.to_string_lossy())
        ),
        Sdk::Bundled => format!(
            "# Not created inside a Conclave checkout: the SDK of the `conclave` binary that created\n\
             # this crate is in {BUNDLED_SDK_DIR}/. To follow a Conclave checkout instead, use\n\
             # `path = \".../strategies/sdk\"` (and delete {BUNDLED_SDK_DIR}/).\n\
             conclave-strategy = {{ path = \"{BUNDLED_SDK_DIR}/strategies/sdk\" }}"
        ),
    };
    format!(
        r#"[package]
name = "{name}"
description = {description}
version = "0.1.0"
edition = "2024"
rust-version = "1.95"
publish = false

# A strategy plugin is a WebAssembly component: build with
#   cargo build --target wasm32-wasip2 --release
# to get target/wasm32-wasip2/release/{lib}.wasm.
[lib]
crate-type = ["cdylib"]

[dependencies]
{dependency}

# Its own workspace, so the crate builds wherever it lives.
[workspace]

# Fast components; plugins are no_std and abort on panic (the host sees a trap).
[profile.release]
opt-level = 3
lto = true
codegen-units = 1
panic = "abort"
strip = true

[profile.dev]
panic = "abort"
"#,
        description = toml_string(&format!("Conclave strategy plugin {strategy}")),
        lib = name.replace('-', "_"),
    )
}

/// A TOML basic string (also a valid JSON and Rust string for the inputs validated above).
fn toml_string(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn lib_rs(name: &str, strategy: &str) -> String {
    let type_name: String = name
        .split(['-', '_'])
        .filter(|part| !part.is_empty())
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format!(
        r#"//! The `{strategy}` strategy plugin for Conclave.
//!
//! Conclave runs `elect` for every election of a Lease whose `spec.strategy` is `{strategy}`,
//! in a sandbox: no clock, filesystem or network; everything the rule may use is in the request
//! (see `wit/strategy.wit` in the Conclave repository, and docs/strategy-authoring.md).
//!
//! The starting rule below is Kubernetes' `OldestEmulationVersion`: lowest emulation version,
//! then lowest binary version, then oldest creation time, then name. Change it to yours, and
//! update `vectors/{name}.json` to match.
//!
//! Candidates arrive sorted by name with their versions parsed (`request.candidates.iter()`
//! gives each as a `Candidate`); `elect` answers with the winner's position. `READS` says which other fields the rule reads (names, labels,
//! annotations...): the host sends only those, which keeps an election fast.
#![cfg_attr(target_arch = "wasm32", no_std)]

use conclave_strategy::prelude::*;

/// The `{strategy}` strategy.
pub struct {type_name};

impl Strategy for {type_name} {{
    const STRATEGIES: &'static [&'static str] = &["{strategy}"];
    const DESCRIPTION: &'static str = "lowest emulation version, then lowest binary version, then oldest creation time, then name";
    // Versions and times always arrive. To read more, e.g. a label:
    // Reads {{ label_keys: &["topology.kubernetes.io/zone"], ..Reads::NOTHING }}
    // `Reads::NOTHING` also says the answer may depend on `request.now`, which is always safe:
    // the plugin is called again at every renewal of the Lease by its holder. This starting rule
    // compares nothing with `now`; once yours is final and does not either, declare
    // Reads {{ now: false, ..Reads::NOTHING }} and those renewals call nothing.
    const READS: Reads = Reads::NOTHING;

    fn elect(request: &ElectionRequest) -> Result<Option<u32>, String> {{
        // A candidate whose versions do not parse has no key and is skipped. Keys compare by
        // emulation version, binary version, creation time, then position (that is, name).
        Ok(request
            .candidates
            .iter()
            .filter_map(|candidate| OldestEmulationKey::new(&candidate))
            .min()
            .map(|key| key.position))
    }}
}}

conclave_strategy::export_strategy!({type_name});
"#
    )
}

fn vectors(strategy: &str) -> String {
    let candidate = |name: &str, binary: &str, emulation: &str| {
        serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1beta1",
            "kind": "LeaseCandidate",
            "metadata": {
                "name": name,
                "namespace": "kube-system",
                "creationTimestamp": "2026-01-01T00:00:00Z"
            },
            "spec": {
                "leaseName": "my-component",
                "binaryVersion": binary,
                "emulationVersion": emulation,
                "renewTime": "2026-06-01T11:59:58.000000Z",
                "strategy": strategy
            }
        })
    };
    let file = serde_json::json!({
        "strategy": strategy,
        "cases": [
            {
                "name": "lowest emulation, then lowest binary version leads",
                "now": "2026-06-01T12:00:00Z",
                "lease": null,
                "candidates": [
                    candidate("baz1", "1.20.0", "1.20.0"),
                    candidate("baz2", "1.20.0", "1.19.0"),
                    candidate("baz3", "1.19.0", "1.19.0"),
                ],
                "expect": {"leader": "baz3"}
            },
            {
                "name": "a full tie is broken by name",
                "now": "2026-06-01T12:00:00Z",
                "lease": null,
                "candidates": [
                    candidate("node-b", "1.33.0", "1.33.0"),
                    candidate("node-a", "1.33.0", "1.33.0"),
                ],
                "expect": {"leader": "node-a"}
            },
            {
                "name": "no eligible candidate elects nobody",
                "now": "2026-06-01T12:00:00Z",
                "lease": null,
                "candidates": [candidate("broken", "not-a-version", "1.33.0")],
                "expect": {"leader": null}
            }
        ]
    });
    serde_json::to_string_pretty(&file).expect("a JSON value serialises") + "\n"
}

fn readme(name: &str, strategy: &str) -> String {
    let lib = name.replace('-', "_");
    format!(
        r#"# {name}

A Conclave strategy plugin implementing `{strategy}`. See `docs/strategy-authoring.md` in the
Conclave repository (or in `conclave-sdk/`, when this crate was created outside a checkout) for
the contract, the limits and how to ship a plugin.

## Build

    rustup target add wasm32-wasip2
    cargo build --target wasm32-wasip2 --release

The component is `target/wasm32-wasip2/release/{lib}.wasm`.

## Test

    conclave strategy test target/wasm32-wasip2/release/{lib}.wasm --vectors vectors/{name}.json
    conclave strategy inspect target/wasm32-wasip2/release/{lib}.wasm
    conclave strategy bench target/wasm32-wasip2/release/{lib}.wasm --candidates 100

Each case in `vectors/{name}.json` is a set of LeaseCandidates (as `kubectl get -o json` prints
them), an optional Lease, the time, optional `settings`, and the expected leader
(`"expect": {{"leader": "NAME"}}`, `{{"leader": null}}` for nobody, or `{{"error": true}}` when
`elect` must fail).

## Ship

Copy `{lib}.wasm` into the controller's plugin directory (`conclave run --plugins DIR`), with an
optional sidecar `{lib}.json` holding its settings, limits and sha256 pin, and set
`spec.strategy: {strategy}` on the Lease's LeaseCandidates.
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_and_javascript_projects_are_complete_and_filled_in() {
        for (lang, main) in [(Lang::Python, "app.py"), (Lang::Javascript, "app.js")] {
            let parent = tempfile::tempdir().unwrap();
            let dir = parent.path().join("my-rule");
            scaffold_interpreted(lang, "my-rule", "example.com/my-rule", &dir).unwrap();
            for file in [
                main,
                "README.md",
                ".gitignore",
                "vectors/my-rule.json",
                "my_rule.json",
                "wit/strategy.wit",
            ] {
                let text = std::fs::read_to_string(dir.join(file))
                    .unwrap_or_else(|error| panic!("{lang:?}: {file}: {error}"));
                assert!(
                    !text.contains("{{"),
                    "{lang:?}: {file} has a placeholder left"
                );
            }
            let vectors: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join("vectors/my-rule.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(vectors["strategy"], "example.com/my-rule");
            let sidecar: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("my_rule.json")).unwrap())
                    .unwrap();
            assert!(
                sidecar["limits"]["instances"].as_u64().unwrap() >= 38,
                "{sidecar}"
            );
            assert!(
                std::fs::read_to_string(dir.join("wit/strategy.wit"))
                    .unwrap()
                    .contains("package conclave:strategy@0.4.0")
            );
            let again = scaffold_interpreted(lang, "my-rule", "example.com/my-rule", &dir);
            assert!(again.is_err(), "{lang:?}: a non-empty directory is refused");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_name("my-strategy").is_ok());
        assert!(validate_name("rule_2").is_ok());
        for bad in ["", "My", "2rule", "my rule", "my/rule", "ü"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_strategy_name("example.com/my-rule").is_ok());
        for bad in [
            "my-rule",
            OLDEST_EMULATION_VERSION,
            MINIMUM_COMPATIBILITY_VERSION,
            "example.com/",
            "exa mple.com/rule",
        ] {
            assert!(validate_strategy_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn relative_paths_climb_to_the_common_ancestor() {
        assert_eq!(
            relative_path(
                Path::new("/repo/target/x/my-rule"),
                Path::new("/repo/strategies/sdk")
            ),
            PathBuf::from("../../../strategies/sdk")
        );
        assert_eq!(
            relative_path(
                Path::new("/repo/strategies/my-rule"),
                Path::new("/repo/strategies/sdk")
            ),
            PathBuf::from("../sdk")
        );
    }

    #[test]
    fn without_a_checkout_the_sdk_is_bundled_and_existing_dirs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("my-rule");
        let sdk = scaffold("my-rule", "example.com/my-rule", &target, None).unwrap();
        assert_eq!(sdk, Sdk::Bundled);
        let manifest = std::fs::read_to_string(target.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("conclave-strategy = { path = \"conclave-sdk/strategies/sdk\" }")
        );
        assert!(target.join("Cargo.lock").is_file());
        let sdk_manifest =
            std::fs::read_to_string(target.join("conclave-sdk/strategies/sdk/Cargo.toml")).unwrap();
        assert!(!sdk_manifest.contains("workspace"), "{sdk_manifest}");
        assert!(
            sdk_manifest.contains("conclave-core = { path = \"../../core\""),
            "{sdk_manifest}"
        );
        assert!(target.join("conclave-sdk/wit/strategy.wit").is_file());
        let error = scaffold("my-rule", "example.com/my-rule", &target, None).unwrap_err();
        assert!(error.to_string().contains("already exists"), "{error}");

        // An SDK from a checkout the crate is not in is referred to by absolute path.
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap();
        let sdk_dir = repo.join("strategies/sdk").canonicalize().unwrap();
        let other = dir.path().join("other");
        let sdk = scaffold("other", "example.com/other", &other, Some(&sdk_dir)).unwrap();
        assert_eq!(sdk, Sdk::Path(sdk_dir));
        assert!(other.join("Cargo.lock").is_file());
    }

    #[test]
    fn inside_a_checkout_the_sdk_is_found_by_path() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap();
        let sdk = find_sdk(&repo.join("target").join("not-yet").join("my-rule")).unwrap();
        assert_eq!(sdk, repo.join("strategies/sdk").canonicalize().unwrap());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(find_sdk(dir.path()), None);
    }
}
