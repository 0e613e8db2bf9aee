"""Cardano address checks against the CIP-19 test vectors and addresses built from them."""

from __future__ import annotations

import bech32
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle_client.cardano.address import (
    AddressError,
    check_address,
    encode_address,
    network_for_channel,
    parse_payment_address,
)

# CIP-19's test keys: payment and stake key hashes behind its vectors.
PAY = bytes.fromhex("9493315cd92eb5d8c4304e67b7e16ae36d61d34502694657811a2c8e")
STAKE = bytes.fromhex("337b62cfff6403a06a3acbc34f8c46003c69fe79a3628cefa9c47251")
SCRIPT = bytes.fromhex("c37b1b5dc0669f1d3c61a6fddb2e8fde96be87b881c60bce8e8d542f")
POINTER = bytes.fromhex("8198bd431b03")  # CIP-19: slot 2498243, tx 27, cert 3

MAINNET_BASE = (
    "addr1qx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgse35a3x"
)
TESTNET_BASE = (
    "addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer3n0d3vllmyqwsx5wktcd8cc3sq835lu7"
    "drv2xwl2wywfgs68faae"
)
TESTNET_ENTERPRISE = "addr_test1vz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzerspjrlsz"
MAINNET_POINTER = "addr1gx2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer5pnz75xxcrzqf96k"
TESTNET_POINTER = "addr_test1gz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzer5pnz75xxcrdw5vky"
STAKE_ADDRESS = "stake1uyehkck0lajq8gr28t9uxnuvgcqrc6070x3k9r8048z8y5gh6ffgw"
# The CIP-19 vectors whose payment part is the key hash PAY, with their networks.
KEY_ADDRESSES = [
    (MAINNET_BASE, "mainnet"),
    (TESTNET_BASE, "testnet"),
    (TESTNET_ENTERPRISE, "testnet"),
    (MAINNET_POINTER, "mainnet"),
    (TESTNET_POINTER, "testnet"),
]


def test_encoder_reproduces_the_cip19_vectors() -> None:
    assert encode_address("addr", bytes([0x01]) + PAY + STAKE) == MAINNET_BASE
    assert encode_address("addr_test", bytes([0x00]) + PAY + STAKE) == TESTNET_BASE
    assert encode_address("addr_test", bytes([0x60]) + PAY) == TESTNET_ENTERPRISE
    assert encode_address("addr", bytes([0x41]) + PAY + POINTER) == MAINNET_POINTER


def test_short_addresses_agree_with_the_bech32_package() -> None:
    # Under 90 characters the reference decoder works, so it cross-checks the checksum code.
    hrp, words = bech32.bech32_decode(TESTNET_ENTERPRISE)
    assert hrp == "addr_test" and words is not None
    payload = bech32.convertbits(words, 5, 8, False)
    assert payload is not None and bytes(payload) == bytes([0x60]) + PAY
    assert bech32.bech32_encode(hrp, words) == TESTNET_ENTERPRISE


@pytest.mark.parametrize(
    ("address", "network"),
    # bech32 allows all upper case (QR codes)
    [*KEY_ADDRESSES, (TESTNET_BASE.upper(), "testnet")],
)
def test_valid_addresses(address: str, network: str) -> None:
    assert check_address(address, network) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("header", [0x00, 0x10, 0x20, 0x30])
def test_every_base_type_with_script_or_key_parts(header: int) -> None:
    address = encode_address("addr_test", bytes([header]) + PAY + SCRIPT)
    assert check_address(address, "testnet") is None


@pytest.mark.parametrize("header", [0x60, 0x70])
def test_enterprise_key_and_script(header: int) -> None:
    assert check_address(encode_address("addr", bytes([header | 1]) + SCRIPT), "mainnet") is None


def test_mainnet_address_on_a_test_channel() -> None:
    message = check_address(MAINNET_BASE, "testnet", channel="nunet-test")
    assert message == (
        "this is a mainnet address; channel nunet-test is a test channel, "
        "use an addr_test1… address"
    )


def test_testnet_address_on_mainnet() -> None:
    message = check_address(TESTNET_BASE, "mainnet")
    assert message == (
        "this is a testnet address; a mainnet address is needed, use an addr1… address"
    )


def test_header_network_must_match_the_prefix() -> None:
    forged = encode_address("addr_test", bytes([0x01]) + PAY + STAKE)
    message = check_address(forged, "testnet")
    assert message is not None
    assert "says testnet but its header says mainnet" in message
    odd = encode_address("addr_test", bytes([0x03]) + PAY + STAKE)
    assert "network id 3" in (check_address(odd, "testnet") or "")


def test_every_single_character_change_is_caught() -> None:
    separator = TESTNET_BASE.rindex("1")
    for position in range(separator + 1, len(TESTNET_BASE)):
        original = TESTNET_BASE[position]
        replacement = "q" if original != "q" else "p"
        mistyped = TESTNET_BASE[:position] + replacement + TESTNET_BASE[position + 1 :]
        assert check_address(mistyped, "testnet") is not None, position


def test_swapped_neighbours_are_caught() -> None:
    i = 40
    swapped = TESTNET_BASE[:i] + TESTNET_BASE[i + 1] + TESTNET_BASE[i] + TESTNET_BASE[i + 2 :]
    assert swapped != TESTNET_BASE
    assert "checksum" in (check_address(swapped, "testnet") or "")


def test_truncated_addresses() -> None:
    assert "checksum" in (check_address(TESTNET_BASE[:-1], "testnet") or "")
    assert "too short" in (check_address("addr_test1qz2f", "testnet") or "")
    # Cut but re-checksummed: only the payload length can tell.
    cut = encode_address("addr_test", bytes([0x00]) + PAY + STAKE[:-1])
    assert check_address(cut, "testnet") == (
        "base address payload is 56 bytes, expected 57: it is cut off"
    )
    long = encode_address("addr_test", bytes([0x60]) + PAY + b"\x00")
    assert check_address(long, "testnet") == (
        "enterprise address payload is 30 bytes, expected 29: it is too long"
    )
    pointer = encode_address("addr_test", bytes([0x40]) + PAY + bytes([0x81, 0x00, 0x81]))
    assert "pointer" in (check_address(pointer, "testnet") or "")


def test_mixed_case() -> None:
    mixed = TESTNET_BASE[:20] + TESTNET_BASE[20:].upper()
    assert "mixes upper- and lower-case" in (check_address(mixed, "testnet") or "")


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("", "address is required"),
        ("hello", "should start with addr_test1"),
        ("addr_test1", "too short"),
        (" " + TESTNET_BASE, "spaces"),
        (TESTNET_BASE[:50] + "\n" + TESTNET_BASE[50:], "spaces"),
        ("addr_test1qé", "never appear"),
        ("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", "prefix 'bc'"),
        (STAKE_ADDRESS, "stake (reward account)"),
        ("Ae2tdPwUPEZFRbyhz3cpfC2CumGzNkFBN2L42rcUc2yjQpEkxDbkPodpMAi", "Byron"),
        ("addr_test1qz2fxv2umyhttkxyxp8x0dlpdt3k6cwng5pxj3jhsydzerbo", "'b'"),
        ("x" * 300, "characters long"),
    ],
)
def test_garbage(address: str, fragment: str) -> None:
    message = check_address(address, "testnet")
    assert message is not None
    assert fragment in message


def test_non_payment_header_types() -> None:
    byron = encode_address("addr_test", bytes([0x80]) + PAY)
    assert "Byron" in (check_address(byron, "testnet") or "")
    reward = encode_address("addr_test", bytes([0xE0]) + STAKE)
    assert "stake" in (check_address(reward, "testnet") or "")
    unknown = encode_address("addr_test", bytes([0x90]) + PAY)
    assert "type 9" in (check_address(unknown, "testnet") or "")


@settings(max_examples=60, deadline=None)
@given(
    header=st.integers(min_value=0, max_value=3),
    hashes=st.binary(min_size=56, max_size=56),
    mainnet=st.booleans(),
)
def test_any_well_formed_base_address_passes(header: int, hashes: bytes, mainnet: bool) -> None:
    hrp = "addr" if mainnet else "addr_test"
    address = encode_address(hrp, bytes([header << 4 | int(mainnet)]) + hashes)
    assert check_address(address, "mainnet" if mainnet else "testnet") is None


@pytest.mark.parametrize(
    ("channel", "network"),
    [
        ("nunet-test", "testnet"),
        ("nunet-team", "testnet"),
        ("testnet", "testnet"),
        ("test-local", "testnet"),
        ("sandbox", "testnet"),
        ("", "testnet"),
        ("nunet", "mainnet"),
        ("mainnet", "mainnet"),
        ("nunet-mainnet", "mainnet"),
        ("acme-mainnet", "mainnet"),
        ("mainnet-test", "testnet"),
    ],
)
def test_network_for_channel(channel: str, network: str) -> None:
    assert network_for_channel(channel) == network


# -- the escrow's reading: the payment key hash, for key addresses only ----------------------


@pytest.mark.parametrize(("address", "network"), KEY_ADDRESSES)
def test_parse_gives_the_payment_key_hash(address: str, network: str) -> None:
    parsed = parse_payment_address(address)
    assert parsed.network == network and parsed.text == address
    assert parsed.payment_key_hash == PAY
    assert parse_payment_address(address, network).payment_key_hash == PAY  # type: ignore[arg-type]


@pytest.mark.parametrize("header", [0x10, 0x30, 0x50, 0x70])
def test_parse_refuses_a_script_payment_part(header: int) -> None:
    # check_address accepts these (rewards can go to a script); an escrow party needs a key.
    rest = STAKE if header < 0x40 else POINTER if header < 0x60 else b""
    address = encode_address("addr_test", bytes([header]) + SCRIPT + rest)
    assert check_address(address, "testnet") is None
    with pytest.raises(AddressError, match="pays a script"):
        parse_payment_address(address)


def test_parse_refuses_upper_case_and_the_other_network() -> None:
    assert check_address(TESTNET_BASE.upper(), "testnet") is None
    with pytest.raises(AddressError, match="lowercase"):
        parse_payment_address(TESTNET_BASE.upper())
    with pytest.raises(AddressError, match="this is a testnet address"):
        parse_payment_address(TESTNET_BASE, "mainnet")
    with pytest.raises(AddressError, match="should start with addr1 or addr_test1"):
        parse_payment_address("hello")


@pytest.mark.parametrize(
    "address",
    [
        "",
        "addr_test1",
        TESTNET_BASE[:-1],
        TESTNET_BASE[:20] + TESTNET_BASE[20:].upper(),
        STAKE_ADDRESS,
        encode_address("addr_test", bytes([0x01]) + PAY + STAKE),  # header says mainnet
        encode_address("addr_test", bytes([0x00]) + PAY + STAKE[:-1]),
        encode_address("addr_test", bytes([0x40]) + PAY + bytes([0x81, 0x00, 0x81])),
        encode_address("addr_test", bytes([0x80]) + PAY),
    ],
)
def test_both_readings_refuse_with_the_same_sentence(address: str) -> None:
    message = check_address(address, "testnet")
    assert message is not None
    with pytest.raises(AddressError) as refused:
        parse_payment_address(address, "testnet")
    assert str(refused.value) == message


@settings(max_examples=200, deadline=None)
@given(
    header=st.integers(min_value=0, max_value=15),
    network_id=st.integers(min_value=0, max_value=2),
    body=st.binary(min_size=0, max_size=70),
    hrp=st.sampled_from(["addr", "addr_test", "stake_test"]),
)
def test_both_readings_agree_on_any_payload(
    header: int, network_id: int, body: bytes, hrp: str
) -> None:
    address = encode_address(hrp, bytes([header << 4 | network_id]) + body)
    message = check_address(address, "testnet")
    try:
        parsed = parse_payment_address(address, "testnet")
    except AddressError as exc:
        assert message == str(exc) or (message is None and header & 1), (message, exc)
    else:
        assert message is None and not header & 1
        assert parsed.payment_key_hash == body[:28]
