"""The SASL servers under arbitrary input: they answer or refuse with SaslError, never
crash otherwise, and never complete an exchange without the credential."""

from __future__ import annotations

import base64

from hypothesis import given, settings
from hypothesis import strategies as st

from loglake.security.sasl import SaslError, sasl_server
from loglake.security.scram import ScramClient, new_credential

CREDENTIALS = {
    "alice": {
        "SCRAM-SHA-256": new_credential("SCRAM-SHA-256", "secret"),
        "SCRAM-SHA-512": new_credential("SCRAM-SHA-512", "secret"),
    }
}


def credentials_of(user: str):
    return CREDENTIALS.get(user, {})


tokens = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(str.encode),
    # Near-valid SCRAM and PLAIN shapes, where parsers are likeliest to slip.
    st.builds(lambda n, r: f"n,,n={n},r={r}".encode(), st.text(max_size=20), st.text(max_size=30)),
    st.builds(
        lambda a, b, c: f"{a}\0{b}\0{c}".encode(), st.text(max_size=10), st.text(max_size=10), st.text(max_size=10)
    ),
)


@settings(max_examples=300, deadline=None)
@given(mechanism=st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]), exchange=st.lists(tokens, max_size=4))
def test_arbitrary_tokens_never_crash_or_authenticate(mechanism: str, exchange: list[bytes]) -> None:
    server = sasl_server(mechanism, credentials_of)
    for token in exchange:
        if server.complete:
            break
        try:
            server.evaluate(token)
        except SaslError:
            return
    if server.complete:
        # Only the right password completes PLAIN; SCRAM needs a proof no random token has.
        assert mechanism == "PLAIN" and any(t.endswith(b"\0secret") for t in exchange)


@settings(max_examples=100, deadline=None)
@given(flip=st.integers(min_value=0, max_value=200), mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]))
def test_a_tampered_client_final_message_is_refused(flip: int, mechanism: str) -> None:
    server = sasl_server(mechanism, credentials_of)
    client = ScramClient(mechanism, "alice", "secret")
    original = client.final_message(server.evaluate(client.first_message()))
    final = bytearray(original)
    final[flip % len(final)] ^= 0x01
    try:
        server.evaluate(bytes(final))
    except SaslError:
        return
    # Accepted only if it says the same: base64 ignores the spare bits of its last character.
    head, _, proof = bytes(final).rpartition(b",p=")
    original_head, _, original_proof = original.rpartition(b",p=")
    assert head == original_head and base64.b64decode(proof) == base64.b64decode(original_proof)
