//! The import check every component passes before it is linked, and the hints that tell a
//! plugin's author how to fix an import Conclave does not provide.

use super::error::LoadError;
use wasmtime::component::Component;

/// The only host interface a plugin may import, in every contract version the host loads.
const LOG_INTERFACES: [&str; 4] = [
    "conclave:strategy/log@0.4.",
    "conclave:strategy/log@0.3.",
    "conclave:strategy/log@0.2.",
    "conclave:strategy/log@0.1.",
];

/// The WASI 0.2 packages the deny-all context of `--allow-wasi` provides (wasmtime-wasi's p2
/// linker): anything else under `wasi:`, such as `wasi:http`, is missing even with the flag.
const PROVIDED_WASI: [&str; 6] = [
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];

/// A toolchain that builds plugins in another language, recognised by the producers section of
/// the component, so that a refused import comes with that toolchain's fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Toolchain {
    ComponentizePy,
    ComponentizeJs,
}

impl Toolchain {
    /// The toolchain named in any producers section of `bytes` (the component's or a nested
    /// module's), if it is one we know.
    fn of(bytes: &[u8]) -> Option<Self> {
        use wasmparser::{KnownCustom, Payload};
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let section = match payload {
                Ok(Payload::CustomSection(section)) => section,
                Ok(_) => continue,
                // Not binary (a test's text fixture) or malformed: no toolchain to name.
                Err(_) => return None,
            };
            let KnownCustom::Producers(producers) = section.as_known() else {
                continue;
            };
            for field in producers.into_iter().flatten() {
                for value in field.values.into_iter().flatten() {
                    let name = value.name.to_ascii_lowercase();
                    if name.contains("componentize-py") {
                        return Some(Self::ComponentizePy);
                    }
                    if name.contains("componentize-js") || name.contains("starlingmonkey") {
                        return Some(Self::ComponentizeJs);
                    }
                }
            }
        }
        None
    }

    /// How to build a component of this toolchain that imports no WASI at all.
    fn without_wasi(self) -> &'static str {
        match self {
            Self::ComponentizePy => {
                "componentize-py: add --stub-wasi to `componentize-py ... componentize` for a \
                 component that imports no WASI"
            }
            Self::ComponentizeJs => {
                "componentize-js: build with `--disable stdio random clocks http fetch-event` \
                 (jco componentize -d ...) for a component that imports no WASI"
            }
        }
    }
}

/// Why `import` cannot be satisfied and what to do about it; `None` when it can.
fn refusal(import: &str, allow_wasi: bool, toolchain: Option<Toolchain>) -> Option<String> {
    if LOG_INTERFACES
        .iter()
        .any(|prefix| import.starts_with(prefix))
    {
        return None;
    }
    if !import.starts_with("wasi:") {
        return Some(
            "a strategy plugin may import only conclave:strategy/log (0.4.x, 0.3.x, 0.2.x or 0.1.x)"
                .to_owned(),
        );
    }
    let provided = PROVIDED_WASI
        .iter()
        .any(|package| import.starts_with(package))
        && import.contains("@0.2.");
    let fix = toolchain.map(Toolchain::without_wasi);
    match (allow_wasi, provided, fix) {
        (true, true, _) => None,
        (true, false, Some(fix)) => Some(format!(
            "--allow-wasi provides only WASI 0.2's cli, clocks, filesystem, io, random and \
             sockets; {fix}"
        )),
        (true, false, None) => Some(
            "--allow-wasi provides only WASI 0.2's cli, clocks, filesystem, io, random and \
             sockets; build the plugin without this interface"
                .to_owned(),
        ),
        (false, _, Some(fix)) => Some(format!(
            "{fix}, or run with --allow-wasi to give it a deny-all WASI context"
        )),
        (false, _, None) => Some(
            "build the plugin with the conclave-strategy SDK (no_std, imports no WASI), or run \
             with --allow-wasi to give it a deny-all WASI context"
                .to_owned(),
        ),
    }
}

/// The component's imports, in order; fails naming the first one Conclave does not provide,
/// with the fix (for the Python and JavaScript toolchains, theirs).
pub(super) fn check(
    engine: &wasmtime::Engine,
    plugin: &str,
    bytes: &[u8],
    component: &Component,
    allow_wasi: bool,
) -> Result<Vec<String>, LoadError> {
    let imports: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_owned())
        .collect();
    let mut toolchain = None;
    for import in &imports {
        let mut hint = refusal(import, allow_wasi, None);
        if hint.is_some() && import.starts_with("wasi:") {
            toolchain = toolchain.or_else(|| Some(Toolchain::of(bytes)));
            hint = refusal(import, allow_wasi, toolchain.flatten());
        }
        if let Some(hint) = hint {
            return Err(LoadError::ForbiddenImport {
                plugin: plugin.to_owned(),
                import: import.clone(),
                hint,
            });
        }
    }
    Ok(imports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_interfaces_of_every_contract_pass_and_other_hosts_interfaces_do_not() {
        for version in ["0.1.0", "0.2.0", "0.3.0", "0.4.0"] {
            assert_eq!(
                refusal(&format!("conclave:strategy/log@{version}"), false, None),
                None
            );
        }
        let other = refusal("example:host/net@1.0.0", true, None).unwrap();
        assert!(other.contains("only conclave:strategy/log"), "{other}");
    }

    #[test]
    fn wasi_needs_the_flag_and_then_only_what_the_deny_all_context_provides() {
        let without = refusal("wasi:cli/stdout@0.2.3", false, None).unwrap();
        assert!(without.contains("--allow-wasi"), "{without}");
        assert_eq!(refusal("wasi:cli/stdout@0.2.3", true, None), None);
        assert_eq!(refusal("wasi:io/streams@0.2.0", true, None), None);
        let http = refusal("wasi:http/types@0.2.3", true, None).unwrap();
        assert!(http.contains("provides only"), "{http}");
        let newer = refusal("wasi:cli/stdout@0.3.0", true, None).unwrap();
        assert!(newer.contains("provides only"), "{newer}");
    }

    #[test]
    fn a_known_toolchain_gets_its_own_fix() {
        let js = refusal(
            "wasi:http/types@0.2.3",
            true,
            Some(Toolchain::ComponentizeJs),
        )
        .unwrap();
        assert!(
            js.contains("--disable stdio random clocks http fetch-event"),
            "{js}"
        );
        let py = refusal(
            "wasi:cli/stdout@0.2.0",
            false,
            Some(Toolchain::ComponentizePy),
        )
        .unwrap();
        assert!(
            py.contains("--stub-wasi") && py.contains("--allow-wasi"),
            "{py}"
        );
    }

    #[test]
    fn the_toolchain_is_read_from_a_producers_section() {
        let producers = module_with_producers("processed-by", "componentize-py", "0.25.1");
        assert_eq!(Toolchain::of(&producers), Some(Toolchain::ComponentizePy));
        let producers = module_with_producers("processed-by", "wit-component", "0.258.3");
        assert_eq!(Toolchain::of(&producers), None);
    }

    /// A core module with nothing but a producers section holding one field with one value.
    fn module_with_producers(field: &str, name: &str, version: &str) -> Vec<u8> {
        fn leb(mut value: usize, out: &mut Vec<u8>) {
            loop {
                let byte = (value & 0x7f) as u8;
                value >>= 7;
                if value == 0 {
                    out.push(byte);
                    return;
                }
                out.push(byte | 0x80);
            }
        }
        fn text(value: &str, out: &mut Vec<u8>) {
            leb(value.len(), out);
            out.extend_from_slice(value.as_bytes());
        }
        let mut section = Vec::new();
        text("producers", &mut section);
        leb(1, &mut section);
        text(field, &mut section);
        leb(1, &mut section);
        text(name, &mut section);
        text(version, &mut section);
        let mut module = b"\0asm\x01\0\0\0".to_vec();
        module.push(0);
        leb(section.len(), &mut module);
        module.extend_from_slice(&section);
        module
    }
}
