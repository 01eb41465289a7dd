"""What-if: replay a run's recent arrivals in the simulator under other knobs, before they are applied."""
