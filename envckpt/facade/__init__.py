"""The trainer-facing facade over N Gym instances."""
