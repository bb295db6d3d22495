"""Training-framework integrations. Each module imports its framework and is imported only
when asked for: `from torchtriage.integrations.lightning import TriageCallback`,
`from torchtriage.integrations.hf import TriageTrainerCallback`."""
