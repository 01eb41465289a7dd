"""Wave planning: how many tokens the next wave gets and which chunks fill it, and what a wave costs."""
