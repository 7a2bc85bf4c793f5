"""The content-addressed build store: its layout, who is making or using an entry (locks), what each entry is
(its content record), and what may go (prune)."""
