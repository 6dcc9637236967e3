"""key_service: the data keys that seal personal data (crypto-shredding)."""
