"""What a worker does to many sessions in one round: timers, adapters, recovery, delivery, pruning."""
