"""The escrow's Distribute (split) redeemer, written directly as UPLC (issue 12).

OpShin 0.28 compiled this path to 290-330 k memory units (2.07-2.41 % of a transaction's
14 M), over the issue's 2 % goal: its preamble of ~100 let-bound helpers, the wrappers
around every field access and its list and map code cost more than the checks themselves.
This module builds the same checks as a small UPLC term; scripts/build_contract.py wraps
the compiled OpShin validator in `with_distribute`, so a spend whose redeemer is constr 2
runs `distribute_check` and every other redeemer (Refund, Claim) runs the OpShin code as
before (docs/payments.md, "Costs").

The checks, in order (the specification is docs/payments.md, "Distribute"):
  1. the script spends an output that has a datum (Plutus V3's ScriptInfo);
  2. the provider or the consumer signed the tx ("neither party signed");
  3. 0 <= provider_amount <= amount ("bad split");
  4. the oracle signed DistributeMessage(domain, "distribute", provider_amount, own_ref)
     ("bad oracle signature");
  5. exactly one script input, whose Value (the lock) holds ADA and one token
     ("one escrow per distribute tx", "a lock holds ADA and one token");
  6. output 0 pays the consumer's full address, exactly the datum's payment key and staking
     part ("consumer paid elsewhere"), at least the lock's lovelace ("lock's ADA not
     returned") and, when amount - provider_amount is above 0, at least that much of the
     token ("consumer underpaid"), in every split, 0 % and 100 % included (issue 20 §5);
     output 1 pays the provider's key (any staking part: the provider chose its address in
     its quote) at least provider_amount when that is above 0 ("provider underpaid").

Reading the terms: each AST node is one step of the CEK machine (100 memory units and 16 k
cpu steps in the Conway cost model, plus the builtin's own cost), and UPLC is strict, so
every value used twice is let-bound (a lambda applied to it) and every branch is delayed.
Data are compared as Data (`equalsData`), not unwrapped to bytes first: a key hash in the
datum is compared with a signer, a policy id with an output's, as the `B` data they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from uplc.ast import (
    AST,
    Apply,
    BuiltIn,
    BuiltinBool,
    BuiltInFun,
    BuiltinInteger,
    BuiltinList,
    BuiltinString,
    BuiltinUnit,
    Delay,
    Error,
    Force,
    Lambda,
    PlutusByteString,
    PlutusInteger,
    Program,
    Variable,
)

from oracle_client.escrow.contract.datum import KIND_DISTRIBUTE, ORACLE_DOMAIN

# Constructor ids and field positions of the Plutus V3 ledger types this path reads
# (plutus-ledger-api V3; oracle_client/cardano/plutus/context.py builds the same shapes).
DISTRIBUTE_CONSTR = 2  # Distribute(signature, provider_amount), datum.py
SPENDING_CONSTR = 1  # ScriptInfo: SpendingScript(tx_out_ref, Maybe datum)
JUST_CONSTR = 0  # Maybe: Just datum
SCRIPT_CREDENTIAL_CONSTR = 1  # Credential: ScriptCredential(hash); PubKeyCredential is 0
PUBKEY_CREDENTIAL_CONSTR = 0
DISTRIBUTE_MESSAGE_CONSTR = 1  # DistributeMessage(domain, kind, provider_amount, escrow)
TX_INFO_SIGNATORIES = 8  # TxInfo: inputs, reference inputs, outputs, fee, mint, certs,
#                          withdrawals, validity range, signatories, ...

# How many forces each polymorphic builtin takes before its arguments.
_FORCES = {
    BuiltInFun.IfThenElse: 1,
    BuiltInFun.Trace: 1,
    BuiltInFun.ChooseList: 2,
    BuiltInFun.HeadList: 1,
    BuiltInFun.TailList: 1,
    BuiltInFun.NullList: 1,
    BuiltInFun.MkCons: 1,
    BuiltInFun.FstPair: 2,
    BuiltInFun.SndPair: 2,
}

UNIT = BuiltinUnit()
FALSE = BuiltinBool(False)
_EMPTY_DATA_LIST = BuiltinList([], PlutusInteger(0))


# -- term builders ----------------------------------------------------------------------


def v(name: str) -> Variable:
    return Variable(name)


def const(value: int) -> BuiltinInteger:
    return BuiltinInteger(value)


def app(function: AST, *args: AST) -> AST:
    term = function
    for arg in args:
        term = Apply(term, arg)
    return term


def lam(names: Sequence[str], body: AST) -> AST:
    for name in reversed(names):
        body = Lambda(name, body)
    return body


def call(builtin: BuiltInFun, *args: AST) -> AST:
    """A builtin applied to its arguments (forced as often as its type needs)."""
    head: AST = BuiltIn(builtin)
    for _ in range(_FORCES.get(builtin, 0)):
        head = Force(head)
    return app(head, *args)


def ite(cond: AST, then: AST, otherwise: AST) -> AST:
    """if cond then `then` else `otherwise`: only the branch taken is evaluated."""
    return Force(call(BuiltInFun.IfThenElse, cond, Delay(then), Delay(otherwise)))


def on_list(items: AST, empty: AST, non_empty: AST) -> AST:
    """`empty` when the builtin list is [], else `non_empty` (only the one taken runs)."""
    return Force(call(BuiltInFun.ChooseList, items, Delay(empty), Delay(non_empty)))


def fail(message: str) -> AST:
    """Abort the script with `message` in its trace (what the tests and off-chain errors read)."""
    return Force(call(BuiltInFun.Trace, BuiltinString(message), Delay(Error())))


def head(items: AST) -> AST:
    return call(BuiltInFun.HeadList, items)


def tail(items: AST, times: int = 1) -> AST:
    for _ in range(times):
        items = call(BuiltInFun.TailList, items)
    return items


def nth(items: AST, index: int) -> AST:
    return head(tail(items, index))


def fields(data: AST) -> AST:
    """A constructor's field list (its id not checked)."""
    return call(BuiltInFun.SndPair, call(BuiltInFun.UnConstrData, data))


def as_list(data: AST) -> AST:
    """A List data's items as a builtin list."""
    return call(BuiltInFun.UnListData, data)


def constr_id(data: AST) -> AST:
    return call(BuiltInFun.FstPair, call(BuiltInFun.UnConstrData, data))


def eq_int(a: AST, b: AST) -> AST:
    return call(BuiltInFun.EqualsInteger, a, b)


def eq_data(a: AST, b: AST) -> AST:
    return call(BuiltInFun.EqualsData, a, b)


def at_most(a: AST, b: AST) -> AST:
    """a <= b"""
    return call(BuiltInFun.LessThanEqualsInteger, a, b)


def positive(a: AST) -> AST:
    return call(BuiltInFun.LessThanInteger, const(0), a)


# A recursive function: bound as `lam(name, *params)` and called with itself as its first
# argument, `recur(name, ...)`; one step cheaper per call than a fixpoint combinator.
def recur(name: str, *args: AST) -> AST:
    return app(v(name), v(name), *args)


@dataclass(frozen=True)
class Let:
    name: str
    value: AST


@dataclass(frozen=True)
class Check:
    cond: AST
    message: str


@dataclass(frozen=True)
class Do:
    """Evaluate `term` (a check that aborts or returns unit) before what follows."""

    term: AST


Step = Let | Check | Do


def block(steps: Sequence[Step], result: AST) -> AST:
    """The steps in order, then `result`: each Let a lambda applied to its value (evaluated
    once, here), each Check an if whose else aborts with its message."""
    term = result
    for index, step in reversed(list(enumerate(steps))):
        if isinstance(step, Let):
            term = Apply(Lambda(step.name, term), step.value)
        elif isinstance(step, Check):
            term = ite(step.cond, term, fail(step.message))
        else:
            term = Apply(Lambda(f"_do{index}", term), step.term)
    return term


# -- the split ----------------------------------------------------------------------------


def _credential_id(tx_out_fields: AST) -> AST:
    """The constructor id of a TxOut's payment credential (TxOut: address, value, ...;
    Address: payment credential, staking credential)."""
    return constr_id(head(fields(head(tx_out_fields))))


def _resolved_fields(tx_in_info: AST) -> AST:
    """TxInInfo(out_ref, resolved): the spent TxOut's fields."""
    return fields(nth(fields(tx_in_info), 1))


# The one script input's Value: "before" walks the inputs to the first one locked by a script
# (any script: a second escrow, ours or another's, could count the same outputs), "after"
# makes sure no other input is.
_ONE_ESCROW = "one escrow per distribute tx"
_ONE_TOKEN = "a lock holds ADA and one token"
_AFTER = lam(
    ["after", "rest", "value"],
    on_list(
        v("rest"),
        v("value"),
        ite(
            eq_int(
                _credential_id(_resolved_fields(head(v("rest")))),
                const(SCRIPT_CREDENTIAL_CONSTR),
            ),
            fail(_ONE_ESCROW),
            recur("after", tail(v("rest")), v("value")),
        ),
    ),
)
_BEFORE = lam(
    ["before", "pending"],
    on_list(
        v("pending"),
        fail(_ONE_ESCROW),
        block(
            [Let("spent", _resolved_fields(head(v("pending"))))],
            ite(
                eq_int(_credential_id(v("spent")), const(SCRIPT_CREDENTIAL_CONSTR)),
                recur("after", tail(v("pending")), nth(v("spent"), 1)),
                recur("before", tail(v("pending"))),
            ),
        ),
    ),
)

# Whether a signer list holds the provider or the consumer (as B data). The builder's one
# required signer is the submitter, so the first comparison usually answers.
_SIGNED = lam(
    ["signed", "signers"],
    on_list(
        v("signers"),
        fail("neither party signed"),
        block(
            [Let("signer", head(v("signers")))],
            ite(
                eq_data(v("signer"), v("provider")),
                UNIT,
                ite(
                    eq_data(v("signer"), v("consumer")),
                    UNIT,
                    recur("signed", tail(v("signers"))),
                ),
            ),
        ),
    ),
)


def _find_key(loop: str, entries: str, key: str, entry: str, found: AST) -> AST:
    """A recursive function `loop` over a Map's `entries` (a builtin list of pairs): `found`
    (which reads v(entry)) for the first entry whose key equals v(key) as Data, 0 when none
    does."""
    return lam(
        [loop, entries],
        on_list(
            v(entries),
            const(0),
            block(
                [Let(entry, head(v(entries)))],
                ite(
                    eq_data(call(BuiltInFun.FstPair, v(entry)), v(key)),
                    found,
                    recur(loop, tail(v(entries))),
                ),
            ),
        ),
    )


# How much of the lock's token (v "policy", v "name", as B data) a Value's entries hold: the
# first entry with that policy, then the first with that name; 0 when there is none (what
# OpShin's `value.get(policy, {b"": 0}).get(name, 0)` gave). The ledger keeps a Value's keys
# unique, so the first is the only one.
_NAMED = _find_key(
    "named",
    "names",
    "name",
    "entry",
    call(BuiltInFun.UnIData, call(BuiltInFun.SndPair, v("entry"))),
)
_QUANTITY = _find_key(
    "quantity",
    "policies",
    "policy",
    "policy_entry",
    recur("named", call(BuiltInFun.UnMapData, call(BuiltInFun.SndPair, v("policy_entry")))),
)


def _pays_at_least(output: AST, credential: AST, share: AST, message: str) -> AST:
    """`output` (a TxOut) pays `credential` (any staking part) at least `share` of the lock's
    token, else abort with `message`."""
    return block(
        [
            Let("paid", fields(output)),
            Check(eq_data(head(fields(head(v("paid")))), credential), message),
            Check(
                at_most(share, recur("quantity", call(BuiltInFun.UnMapData, nth(v("paid"), 1)))),
                message,
            ),
        ],
        UNIT,
    )


def _lovelace(value_entries: AST) -> AST:
    """The lovelace of a Value's entries (a builtin list of pairs): the ledger puts ADA's
    entry (policy b"", name b"") first in every output's and input's Value."""
    ada = call(BuiltInFun.UnMapData, call(BuiltInFun.SndPair, head(value_entries)))
    return call(BuiltInFun.UnIData, call(BuiltInFun.SndPair, head(ada)))


def _address(payment: AST, staking: AST) -> AST:
    """Address(payment credential, Maybe StakingCredential) as Data, from both as Data."""
    items = call(BuiltInFun.MkCons, staking, _EMPTY_DATA_LIST)
    return call(BuiltInFun.ConstrData, const(0), call(BuiltInFun.MkCons, payment, items))


def _pubkey_credential(key_hash: AST) -> AST:
    """PubKeyCredential(key_hash) as Data, from the key hash's B data."""
    return call(
        BuiltInFun.ConstrData,
        const(PUBKEY_CREDENTIAL_CONSTR),
        call(BuiltInFun.MkCons, key_hash, _EMPTY_DATA_LIST),
    )


def distribute_message_term(provider_amount: AST, own_ref: AST) -> AST:
    """serialiseData(DistributeMessage(domain, kind, provider_amount, own_ref)): the bytes
    datum.distribute_message builds off-chain. `provider_amount` is the redeemer's I data
    itself, `own_ref` the ScriptInfo's TxOutRef data."""
    items = call(BuiltInFun.MkCons, own_ref, _EMPTY_DATA_LIST)
    items = call(BuiltInFun.MkCons, provider_amount, items)
    items = call(BuiltInFun.MkCons, PlutusByteString(KIND_DISTRIBUTE), items)
    items = call(BuiltInFun.MkCons, PlutusByteString(ORACLE_DOMAIN), items)
    return call(
        BuiltInFun.SerialiseData,
        call(BuiltInFun.ConstrData, const(DISTRIBUTE_MESSAGE_CONSTR), items),
    )


def distribute_check(tx_info: AST, redeemer_fields: AST, script_info: AST) -> AST:
    """The split's checks: unit, or an abort with the failing check's message. Arguments:
    the ScriptContext's TxInfo and ScriptInfo (Data), the Distribute redeemer's field list."""
    return block(
        [
            Let("script_info", call(BuiltInFun.UnConstrData, script_info)),
            Check(
                eq_int(call(BuiltInFun.FstPair, v("script_info")), const(SPENDING_CONSTR)),
                "not a spend",
            ),
            Let("spending", call(BuiltInFun.SndPair, v("script_info"))),
            Let("maybe_datum", call(BuiltInFun.UnConstrData, nth(v("spending"), 1))),
            Check(
                eq_int(call(BuiltInFun.FstPair, v("maybe_datum")), const(JUST_CONSTR)),
                "no datum",
            ),
            # EscrowDatum: consumer, consumer_stake, provider, oracle_key, job_id, amount,
            # deadline. consumer_stake is read once, at the end: head(datum_rest).
            Let("datum", fields(head(call(BuiltInFun.SndPair, v("maybe_datum"))))),
            Let("consumer", head(v("datum"))),
            Let("datum_rest", tail(v("datum"))),
            Let("party_rest", tail(v("datum_rest"))),
            Let("provider", head(v("party_rest"))),
            Let("info", fields(tx_info)),
            Let("signed", _SIGNED),
            Do(recur("signed", as_list(nth(v("info"), TX_INFO_SIGNATORIES)))),
            Let("redeemer_fields", redeemer_fields),
            Let("provider_amount_data", nth(v("redeemer_fields"), 1)),
            Let("provider_amount", call(BuiltInFun.UnIData, v("provider_amount_data"))),
            Let("key_rest", tail(v("party_rest"))),
            Let("amount", call(BuiltInFun.UnIData, nth(v("key_rest"), 2))),
            Check(
                call(
                    BuiltInFun.IfThenElse,
                    at_most(const(0), v("provider_amount")),
                    at_most(v("provider_amount"), v("amount")),
                    FALSE,
                ),
                "bad split",
            ),
            Check(
                call(
                    BuiltInFun.VerifyEd25519Signature,
                    call(BuiltInFun.UnBData, head(v("key_rest"))),
                    distribute_message_term(v("provider_amount_data"), head(v("spending"))),
                    call(BuiltInFun.UnBData, head(v("redeemer_fields"))),
                ),
                "bad oracle signature",
            ),
            Let("after", _AFTER),
            Let("before", _BEFORE),
            Let("locked", call(BuiltInFun.UnMapData, recur("before", as_list(head(v("info")))))),
            # A Value's entries are ordered by policy, ADA's empty one first: the token is
            # the second and last.
            Let(
                "tokens",
                on_list(v("locked"), fail(_ONE_TOKEN), tail(v("locked"))),
            ),
            Let("token", on_list(v("tokens"), fail(_ONE_TOKEN), head(v("tokens")))),
            Check(call(BuiltInFun.NullList, tail(v("tokens"))), _ONE_TOKEN),
            Let("names", call(BuiltInFun.UnMapData, call(BuiltInFun.SndPair, v("token")))),
            Check(
                on_list(v("names"), FALSE, call(BuiltInFun.NullList, tail(v("names")))),
                _ONE_TOKEN,
            ),
            Let("policy", call(BuiltInFun.FstPair, v("token"))),
            Let("name", call(BuiltInFun.FstPair, head(v("names")))),
            Let("named", _NAMED),
            Let("quantity", _QUANTITY),
            # The layout transactions.distribute builds: the consumer's output first, the
            # provider's second; each is checked where it must be, never one counted twice.
            Let("outputs", as_list(nth(v("info"), 2))),
            # The consumer's output, in every split: its full address (the wallet reads its
            # base address only: the payment key with another staking part is not its
            # money), all of the lock's lovelace, then its share of the token.
            Let("back", fields(head(v("outputs")))),
            Check(
                eq_data(
                    head(v("back")),
                    _address(_pubkey_credential(v("consumer")), head(v("datum_rest"))),
                ),
                "consumer paid elsewhere",
            ),
            Let("back_value", call(BuiltInFun.UnMapData, nth(v("back"), 1))),
            Check(
                at_most(_lovelace(v("locked")), _lovelace(v("back_value"))),
                "lock's ADA not returned",
            ),
            Let(
                "consumer_amount",
                call(BuiltInFun.SubtractInteger, v("amount"), v("provider_amount")),
            ),
            Do(
                ite(
                    positive(v("consumer_amount")),
                    ite(
                        at_most(v("consumer_amount"), recur("quantity", v("back_value"))),
                        UNIT,
                        fail("consumer underpaid"),
                    ),
                    UNIT,
                )
            ),
        ],
        ite(
            positive(v("provider_amount")),
            _pays_at_least(
                nth(v("outputs"), 1),
                _pubkey_credential(v("provider")),
                v("provider_amount"),
                "provider underpaid",
            ),
            UNIT,
        ),
    )


def with_distribute(opshin: Program) -> Program:
    """The escrow script: a Distribute redeemer (constr 2) runs `distribute_check`, a Claim
    or Refund (constr 0, 1) the compiled OpShin validator `opshin` (a V3 script:
    ScriptContext -> unit) on the same context, any other fails. ScriptContext: tx_info,
    redeemer, script_info."""
    term = lam(
        ["ctx"],
        block(
            [
                Let("ctx_fields", fields(v("ctx"))),
                Let("ctx_rest", tail(v("ctx_fields"))),
                Let("redeemer", call(BuiltInFun.UnConstrData, head(v("ctx_rest")))),
                Let("redeemer_id", call(BuiltInFun.FstPair, v("redeemer"))),
            ],
            ite(
                eq_int(v("redeemer_id"), const(DISTRIBUTE_CONSTR)),
                distribute_check(
                    head(v("ctx_fields")),
                    call(BuiltInFun.SndPair, v("redeemer")),
                    nth(v("ctx_rest"), 1),
                ),
                # OpShin -O3 reads any redeemer that is not a Refund as a Claim (its
                # "unknown redeemer" branch is optimised away): constr 3 with a withdraw
                # signature would pass as one, so only Claim and Refund reach it.
                ite(
                    call(BuiltInFun.LessThanInteger, v("redeemer_id"), const(DISTRIBUTE_CONSTR)),
                    app(opshin.term, v("ctx")),
                    fail("unknown redeemer"),
                ),
            ),
        ),
    )
    return Program(opshin.version, term)
