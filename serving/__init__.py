"""serving of lambdaline (see docs/architecture.md)."""
