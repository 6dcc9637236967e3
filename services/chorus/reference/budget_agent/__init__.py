"""The budget agent: reserves budget, asks for approval, and compensates when payment fails."""
