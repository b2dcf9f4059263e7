"""Pure functions over tensors (and small stateful helpers): advantages, losses, aggregation, the group filter, the
entropy controller and span signals. Imports torch and the standard library only (docs/architecture.md)."""
