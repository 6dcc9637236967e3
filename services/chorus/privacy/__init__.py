"""Who may say what, and what stays secret: sealing personal data, signed events, and the
erasure and retention requests every service answers."""
