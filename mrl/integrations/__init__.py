"""mrl inside other trainers: `mrl.integrations.trl` runs any probe inside TRL's GRPOTrainer, one trainer per policy,
sharing experience through `mrl.integrations.file_exchange` (docs/trl.md)."""
