"""Completion webhooks are signed as Standard Webhooks: any such library verifies them."""

from __future__ import annotations

from chorus.platform.gateway.domain import receiver_secrets, webhook_signature

# The test vector of the Standard Webhooks specification (standard-webhooks, spec tests).
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
TIMESTAMP = "1614265330"
BODY = b'{"test": 2432232314}'


def test_the_signature_is_the_specifications() -> None:
    assert (
        webhook_signature([SECRET], MSG_ID, TIMESTAMP, BODY)
        == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    )


def test_while_a_secret_rotates_both_sign() -> None:
    both = webhook_signature([SECRET, "whsec_b2xkLXNlY3JldA=="], MSG_ID, TIMESTAMP, BODY).split()
    assert len(both) == 2 and both[0] == webhook_signature([SECRET], MSG_ID, TIMESTAMP, BODY)


def test_a_receiver_gets_its_own_secret_else_the_default() -> None:
    own = {"https://hooks.example.com": "whsec_new whsec_old"}
    assert receiver_secrets("https://hooks.example.com/done?x=1", own, "whsec_d") == [
        "whsec_new",
        "whsec_old",
    ]
    assert receiver_secrets("https://user:pw@HOOKS.example.com/x", own, "whsec_d") == [
        "whsec_new",
        "whsec_old",
    ]
    assert receiver_secrets("https://other.example/x", own, "whsec_d") == ["whsec_d"]
