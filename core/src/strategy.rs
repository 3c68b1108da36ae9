//! Strategy names and the choice of a Lease's strategy.

use crate::version::Version;
use alloc::string::String;
use alloc::vec::Vec;

/// The one strategy built into Kubernetes.
pub const OLDEST_EMULATION_VERSION: &str = "OldestEmulationVersion";

/// The KEP's original name for [`OLDEST_EMULATION_VERSION`]; Conclave's plugin answers to both.
pub const MINIMUM_COMPATIBILITY_VERSION: &str = "MinimumCompatibilityVersion";

/// Whether a strategy is third-party, i.e. has a domain prefix such as `conclave.dev/priority`.
///
/// Kubernetes accepts only `OldestEmulationVersion` without a prefix, so everything else is
/// third-party; kube-apiserver's built-in controller never elects for such a Lease.
#[must_use]
pub fn is_third_party(strategy: &str) -> bool {
    strategy.contains('/')
}

/// The strategy and binary version one candidate announces, as input to [`resolve_strategy`].
#[derive(Debug, Clone, Copy)]
pub struct StrategyVote<'a> {
    /// The candidate's name, reported in conflicts.
    pub candidate: &'a str,
    /// The candidate's `spec.strategy`.
    pub strategy: &'a str,
    /// The candidate's `spec.binaryVersion`; an unparseable value counts as `0.0.0`, as upstream.
    pub binary_version: &'a str,
}

/// How a Lease's strategy was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StrategyChoice {
    /// The Lease names its strategy and Conclave honours it (upstream overwrites it).
    FromLease(String),
    /// The candidates with the highest binary version agree on this strategy.
    FromCandidates(String),
    /// Candidates tie at the highest binary version but disagree; the election is blocked until
    /// they agree.
    Conflict(StrategyConflict),
    /// The Lease names no strategy and there are no candidates.
    NoCandidates,
}

/// Candidates at the same, highest binary version that announce different strategies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrategyConflict {
    /// The binary version they share.
    pub binary_version: String,
    /// Each distinct strategy with the candidates announcing it, both sorted.
    pub strategies: Vec<(String, Vec<String>)>,
}

impl core::fmt::Display for StrategyConflict {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "candidates at binary version {} announce different strategies:",
            self.binary_version
        )?;
        for (strategy, candidates) in &self.strategies {
            write!(f, " {strategy} ({})", candidates.join(", "))?;
        }
        f.write_str("; make them agree, or set spec.strategy on the Lease")
    }
}

/// Chooses the strategy for a Lease.
///
/// A non-empty `lease_strategy` wins (the KEP's intent: anyone may set it). Otherwise the strategy
/// of the candidates with the highest binary version is used; if they disagree the result is a
/// conflict. The result never depends on the order of `votes`.
#[must_use]
pub fn resolve_strategy(
    lease_strategy: Option<&str>,
    votes: &[StrategyVote<'_>],
) -> StrategyChoice {
    if let Some(strategy) = lease_strategy.filter(|s| !s.is_empty()) {
        return StrategyChoice::FromLease(strategy.into());
    }
    let version_of = |vote: &StrategyVote<'_>| {
        Version::parse_tolerant(vote.binary_version).unwrap_or(Version::new(0, 0, 0))
    };
    let Some(highest) = votes.iter().map(version_of).max() else {
        return StrategyChoice::NoCandidates;
    };
    let mut strategies: Vec<(String, Vec<String>)> = Vec::new();
    for vote in votes.iter().filter(|vote| version_of(vote) == highest) {
        match strategies.iter_mut().find(|(s, _)| s == vote.strategy) {
            Some((_, candidates)) => candidates.push(vote.candidate.into()),
            None => strategies.push((vote.strategy.into(), alloc::vec![vote.candidate.into()])),
        }
    }
    if let [(strategy, _)] = strategies.as_slice() {
        return StrategyChoice::FromCandidates(strategy.clone());
    }
    strategies.sort();
    for (_, candidates) in &mut strategies {
        candidates.sort();
    }
    StrategyChoice::Conflict(StrategyConflict {
        binary_version: alloc::format!("{highest}"),
        strategies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote<'a>(
        candidate: &'a str,
        strategy: &'a str,
        binary_version: &'a str,
    ) -> StrategyVote<'a> {
        StrategyVote {
            candidate,
            strategy,
            binary_version,
        }
    }

    #[test]
    fn lease_strategy_is_honoured() {
        let votes = [vote("a", OLDEST_EMULATION_VERSION, "1.31.0")];
        assert_eq!(
            resolve_strategy(Some("example.com/foo"), &votes),
            StrategyChoice::FromLease("example.com/foo".into())
        );
        assert_eq!(
            resolve_strategy(Some(""), &votes),
            StrategyChoice::FromCandidates(OLDEST_EMULATION_VERSION.into())
        );
    }

    #[test]
    fn highest_binary_version_decides_and_order_does_not_matter() {
        let a = vote("a", "S1", "1.31.0");
        let b = vote("b", "S2", "1.31.0");
        let c = vote("c", "S1", "1.32.0");
        for order in [[a, b, c], [c, a, b], [b, c, a]] {
            assert_eq!(
                resolve_strategy(None, &order),
                StrategyChoice::FromCandidates("S1".into())
            );
        }
    }

    #[test]
    fn tie_at_highest_version_with_different_strategies_is_a_conflict() {
        let votes = [
            vote("b", "S2", "1.32.0"),
            vote("a", "S1", "1.32.0"),
            vote("c", "S1", "v1.32"),
        ];
        let StrategyChoice::Conflict(conflict) = resolve_strategy(None, &votes) else {
            panic!("expected a conflict");
        };
        assert_eq!(conflict.binary_version, "1.32.0");
        assert_eq!(
            conflict.strategies,
            alloc::vec![
                ("S1".into(), alloc::vec!["a".into(), "c".into()]),
                ("S2".into(), alloc::vec!["b".into()])
            ]
        );
    }

    #[test]
    fn unparseable_binary_version_counts_as_zero() {
        let votes = [vote("a", "S1", "garbage"), vote("b", "S2", "0.0.1")];
        assert_eq!(
            resolve_strategy(None, &votes),
            StrategyChoice::FromCandidates("S2".into())
        );
        assert_eq!(resolve_strategy(None, &[]), StrategyChoice::NoCandidates);
    }

    #[test]
    fn third_party_means_domain_prefixed() {
        assert!(is_third_party("conclave.dev/priority"));
        assert!(!is_third_party(OLDEST_EMULATION_VERSION));
    }
}
