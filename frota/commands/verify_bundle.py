"""``frota verify BUNDLE``: a bundle's summary and problems for an inspector, in English or in
Brazilian Portuguese (``--lang pt-BR``). The checking is ``protocols/bundle_check.py``'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from frota.errors import UserError
from protocols.bundle_check import BundleReport, Problem

LANGS = ("en", "pt-BR")
#: The problems of a certificate not valid when the bundle says it was made.
TIME_CODES = frozenset({"no_created", "signer_not_yet_valid", "signer_expired",
                        "ca_not_yet_valid", "ca_expired"})

#: Every problem's message, by language; fields from Problem.detail and ``seq``.
MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "not_a_bundle": "not a bundle (not a ZIP file)",
        "too_large": "a file in the bundle is too large to check",
        "unreadable": "cannot be read from the ZIP",
        "duplicate_member": "in the ZIP twice (a tool may show either copy)",
        "no_manifest": "no readable manifest (or not a frota.bundle)",
        "schema": "bundle schema {schema} is not one this frota reads (1)",
        "unsigned": "the bundle is NOT signed",
        "no_ca": "no CA certificate to check the signature against (give --ca)",
        "no_signer": "the manifest names no signer",
        "bad_certificate": "the signer's certificate does not chain to the fleet CA: {why}",
        "wrong_signer": "certificate of {role} {name} may not sign this bundle",
        "bad_signature": "the manifest's signature does not verify (manifest changed after signing)",
        "no_created": "the manifest does not say when the bundle was made ({created}): the "
                      "certificates' validity cannot be checked",
        "signer_not_yet_valid": "the bundle says it was made at {created}, BEFORE the signer's "
                                "certificate was valid ({not_before} to {not_after})",
        "signer_expired": "the bundle says it was made at {created}, AFTER the signer's "
                          "certificate expired ({not_before} to {not_after})",
        "ca_not_yet_valid": "the bundle says it was made at {created}, BEFORE the fleet CA's "
                            "certificate was valid ({not_before} to {not_after})",
        "ca_expired": "the bundle says it was made at {created}, AFTER the fleet CA's "
                      "certificate expired ({not_before} to {not_after})",
        "signer_unknown": "the signer's key is not in the keyring (--keyring, or keyring.json "
                          "beside --ca): a key the fleet never registered, or a keyring older "
                          "than the key",
        "signer_revoked": "the signer's key was revoked at {revoked}, not after the bundle was "
                          "made ({created})",
        "file_missing": "listed in the manifest but missing",
        "file_changed": "SHA-256 or size differs from the manifest (changed after signing)",
        "file_added": "not listed in the manifest (added after signing)",
        "not_canonical": "not a record in canonical form",
        "other_vehicle": "a record of another vehicle ({vehicle})",
        "duplicate": "seq {seq} twice (first on line {first_line}): a record added",
        "gap": "seq {first} to {last} missing before seq {seq}: records removed",
        "broken_link": "seq {seq}'s prev is not the hash of seq {before}: a record changed, "
                       "removed or added there",
        "count": "{found} records, the manifest says {manifest}",
        "chain_missing": "the manifest lists this agent's chain but no record of it is here",
        "chain_unlisted": "records of an agent the manifest does not list: added",
        "chain_start": "the chain starts at seq {seq}, not where the manifest says ({manifest}) "
                       "or with another prev: a record removed, changed or added at its start",
        "chain_end": "the chain ends at seq {seq}, not where the manifest says ({manifest}) or "
                     "with another hash: a record removed, changed or added at its end",
        "chain_count": "{found} records of this agent, the manifest says {manifest}",
        "missing_in_period": "seq {seq} is a record of {ts}, inside the period, missing from "
                             "the bundle",
    },
    "pt-BR": {
        "not_a_bundle": "não é um pacote (não é um arquivo ZIP)",
        "too_large": "um arquivo do pacote é grande demais para verificar",
        "unreadable": "não pode ser lido do ZIP",
        "duplicate_member": "aparece duas vezes no ZIP (um programa pode mostrar qualquer das cópias)",
        "no_manifest": "manifesto ausente ou ilegível (ou não é um frota.bundle)",
        "schema": "versão {schema} do pacote desconhecida por este frota (1)",
        "unsigned": "o pacote NÃO está assinado",
        "no_ca": "sem certificado da AC para verificar a assinatura (use --ca)",
        "no_signer": "o manifesto não nomeia quem assinou",
        "bad_certificate": "o certificado de quem assinou não é da AC da frota: {why}",
        "wrong_signer": "o certificado de {role} {name} não pode assinar este pacote",
        "bad_signature": "a assinatura do manifesto não confere (manifesto alterado após a "
                         "assinatura)",
        "no_created": "o manifesto não diz quando o pacote foi feito ({created}): a validade dos "
                      "certificados não pode ser conferida",
        "signer_not_yet_valid": "o pacote diz ter sido feito em {created}, ANTES do início da "
                                "validade do certificado de quem assinou ({not_before} a "
                                "{not_after})",
        "signer_expired": "o pacote diz ter sido feito em {created}, DEPOIS de expirado o "
                          "certificado de quem assinou ({not_before} a {not_after})",
        "ca_not_yet_valid": "o pacote diz ter sido feito em {created}, ANTES do início da "
                            "validade do certificado da AC da frota ({not_before} a {not_after})",
        "ca_expired": "o pacote diz ter sido feito em {created}, DEPOIS de expirado o "
                      "certificado da AC da frota ({not_before} a {not_after})",
        "signer_unknown": "a chave do signatário não consta do chaveiro (--keyring, ou "
                          "keyring.json ao lado de --ca): chave que a frota nunca registrou, ou "
                          "chaveiro mais antigo que a chave",
        "signer_revoked": "a chave do signatário foi revogada em {revoked}, não depois de feito o "
                          "pacote ({created})",
        "file_missing": "consta do manifesto mas falta no pacote",
        "file_changed": "SHA-256 ou tamanho diferente do manifesto (alterado após a assinatura)",
        "file_added": "não consta do manifesto (incluído após a assinatura)",
        "not_canonical": "não é um registro em forma canônica",
        "other_vehicle": "registro de outro veículo ({vehicle})",
        "duplicate": "seq {seq} repetido (primeiro na linha {first_line}): registro incluído",
        "gap": "faltam os seq {first} a {last} antes do seq {seq}: registros suprimidos",
        "broken_link": "o prev do seq {seq} não é o hash do seq {before}: registro alterado, "
                       "suprimido ou incluído ali",
        "count": "{found} registros; o manifesto diz {manifest}",
        "chain_missing": "o manifesto lista a cadeia deste agente, mas não há registro dele",
        "chain_unlisted": "registros de um agente que o manifesto não lista: incluídos",
        "chain_start": "a cadeia começa no seq {seq}, não onde o manifesto diz ({manifest}) ou "
                       "com outro prev: registro suprimido, alterado ou incluído no início",
        "chain_end": "a cadeia termina no seq {seq}, não onde o manifesto diz ({manifest}) ou "
                     "com outro hash: registro suprimido, alterado ou incluído no fim",
        "chain_count": "{found} registros deste agente; o manifesto diz {manifest}",
        "missing_in_period": "o seq {seq} é um registro de {ts}, dentro do período, ausente do "
                             "pacote",
    },
}

WORDS: dict[str, dict[str, str]] = {
    "en": {
        "bundle": "bundle {path}: vehicle {vehicle}, {start} to {end} ({timezone}), made {created}",
        "signed": "signed by {role} {name} (key {key}), certificate issued by the fleet CA",
        "ca_given": "fleet CA: the one given with --ca (SHA-256 {fp})",
        "ca_own": "fleet CA: the bundle's own (SHA-256 {fp}) — NOT compared with yours; "
                  "give --ca FILE to check it against the fleet's",
        "records": "{records} record(s), {chained} chained, {unchained} not chained "
                   "(records stored before chaining)",
        "agent": "  agent {agent}: seq {first} to {last}",
        "outside": "{n} link(s) of records outside the period followed (their hashes are in the "
                   "signed manifest)",
        "finding": "the accident-data export of finding {id} ({rule}; {basis})",
        "validity": "certificates valid when the bundle says it was made: the signer's "
                    "{signer_from} to {signer_to}, the fleet CA's {ca_from} to {ca_to}",
        "keyring": "keyring: the signer's key is the fleet's, not revoked",
        "revoked_later": "keyring: the signer's key was revoked at {revoked}, after the bundle "
                         "says it was made",
        "intact": "INTACT: signature, files, hash chain and sequence check out",
        "not_intact": "NOT INTACT: {n} problem(s)",
        "line": "line", "agent_word": "agent",
        "roles": "collector:collector,vehicle:vehicle",
    },
    "pt-BR": {
        "bundle": "pacote {path}: veículo {vehicle}, de {start} a {end} (hora local "
                  "{timezone}), feito em {created}",
        "signed": "assinado por {role} {name} (chave {key}), certificado emitido pela AC da frota",
        "ca_given": "AC da frota: a informada com --ca (SHA-256 {fp})",
        "ca_own": "AC da frota: a do próprio pacote (SHA-256 {fp}) — NÃO comparada com a sua; "
                  "use --ca ARQUIVO para conferir com a da frota",
        "records": "{records} registro(s), {chained} encadeado(s), {unchained} sem cadeia "
                   "(registros anteriores ao encadeamento)",
        "agent": "  agente {agent}: seq {first} a {last}",
        "outside": "{n} elo(s) de registros fora do período seguidos (seus hashes estão no "
                   "manifesto assinado)",
        "finding": "dados do registrador após acidente com vítimas: ocorrência {id} ({rule}; "
                   "{basis})",
        "validity": "certificados válidos quando o pacote diz ter sido feito: o de quem assinou "
                    "de {signer_from} a {signer_to}, o da AC da frota de {ca_from} a {ca_to}",
        "keyring": "chaveiro: a chave do signatário é da frota, não revogada",
        "revoked_later": "chaveiro: a chave do signatário foi revogada em {revoked}, depois de "
                         "feito o pacote segundo ele",
        "intact": "ÍNTEGRO: assinatura, arquivos, cadeia de hashes e sequência conferem",
        "not_intact": "NÃO ÍNTEGRO: {n} problema(s)",
        "line": "linha", "agent_word": "agente",
        "roles": "collector:coletor,vehicle:veículo",
    },
}


def problem_text(p: Problem, lang: str) -> str:
    """One problem as a line: where, then what."""
    words = WORDS[lang]
    where = [x for x in (
        p.file,
        f"{words['line']} {p.line}" if p.line is not None else None,
        f"{words['agent_word']} {p.agent}" if p.agent is not None else None,
    ) if x is not None]
    fields: dict[str, Any] = {"seq": p.seq, **p.detail}
    try:
        what = MESSAGES[lang][p.code].format(**fields)
    except (KeyError, IndexError, ValueError):
        what = p.code
    return f"  {', '.join(where) or '-'}: {what}"


def _local(ts: Any, zone: Any) -> Any:
    """An RFC 3339 time of the manifest as Brazilians read it, ``DD/MM/AAAA HH:MM:SS`` in the
    bundle's time zone (pt-BR summary); as it is when either is not what it should be (the
    manifest is read before anything about it is trusted)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from protocols.records import RecordError, ts_to_ms

    try:
        tz = ZoneInfo(str(zone))
        return datetime.fromtimestamp(ts_to_ms(str(ts)) / 1000, tz).strftime("%d/%m/%Y %H:%M:%S")
    except (RecordError, ValueError, OSError, OverflowError, KeyError):  # KeyError: no such zone
        return ts


def render(path: str, report: BundleReport, lang: str) -> list[str]:
    """The summary and each problem, in ``lang``."""
    words = WORDS[lang]
    roles = dict(pair.split(":") for pair in words["roles"].split(","))
    m = report.manifest
    out: list[str] = []
    if m:
        zone = m.get("timezone", "UTC")
        start, end, created = (_local(m.get(k), zone) if lang == "pt-BR" else m.get(k)
                               for k in ("from", "to", "created"))
        out.append(words["bundle"].format(path=path, vehicle=m.get("vehicle"), start=start,
                                          end=end, timezone=zone, created=created))
    finding = m.get("finding") if m else None
    if isinstance(finding, dict):  # the accident-data export (collector/web/accident.py)
        basis = finding.get("basis")
        out.append(words["finding"].format(
            id=finding.get("id"), rule=finding.get("rule"),
            basis="; ".join(str(b) for b in basis) if isinstance(basis, list) else "-"))
    if report.signer_role is not None:
        signer = m.get("signer") if isinstance(m.get("signer"), dict) else {}
        out.append(words["signed"].format(role=roles.get(report.signer_role, report.signer_role),
                                          name=report.signer_name,
                                          key=(signer or {}).get("key")))
    if report.ca_fingerprint is not None:
        out.append(words["ca_given" if report.ca_given else "ca_own"].format(
            fp=report.ca_fingerprint))
    codes = {p.code for p in report.problems}
    if len(report.validity) == 2 and not codes & TIME_CODES:
        zone = m.get("timezone", "UTC")
        shown = {f"{what}_{end}": (_local(ts, zone) if lang == "pt-BR" else ts)
                 for what, period in report.validity.items()
                 for end, ts in zip(("from", "to"), period, strict=True)}
        out.append(words["validity"].format(**shown))
    if report.keyring_checked and not codes & {"signer_unknown", "signer_revoked"}:
        out.append(words["keyring"] if report.signer_revoked is None else
                   words["revoked_later"].format(revoked=report.signer_revoked))
    if m:
        out.append(words["records"].format(records=report.records, chained=report.chained,
                                           unchained=report.unchained))
    for agent, (first, last) in sorted(report.agents.items()):
        out.append(words["agent"].format(agent=agent, first=first, last=last))
    if report.outside:
        out.append(words["outside"].format(n=report.outside))
    if report.intact:
        out.append(words["intact"])
    else:
        out.append(words["not_intact"].format(n=len(report.problems)))
        out.extend(problem_text(p, lang) for p in report.problems)
    return out


def run_bundle(path: str, ca: Path | None, lang: str, keyring_path: Path | None = None) -> int:
    """Check the bundle at ``path``; print the summary; 0 intact, 3 otherwise. The keyring:
    ``keyring_path``, else ``keyring.json`` beside ``ca`` when there is one."""
    from frota.commands.verify import NOT_INTACT
    from protocols.bundle_check import check_bundle
    from protocols.identity import IdentityError, load_cert_file
    from protocols.keyring import load_keyring

    if lang not in LANGS:
        raise UserError(f"--lang {lang!r}: one of {', '.join(LANGS)}")
    fleet_ca = keyring = None
    if keyring_path is not None and ca is None:
        raise UserError("--keyring needs --ca (the keyring is checked against the fleet CA)")
    if keyring_path is not None and not keyring_path.is_file():
        raise UserError(f"no keyring at {keyring_path}")
    if ca is not None:
        try:
            fleet_ca = load_cert_file(ca)
            beside = ca.parent / "keyring.json"
            chosen = keyring_path or (beside if beside.is_file() else None)
            keyring = None if chosen is None else load_keyring(chosen, fleet_ca)
        except IdentityError as err:
            raise UserError(str(err)) from err
    from protocols import bundle_check

    try:
        # a file larger than any bundle is not read into memory at all
        too_large = Path(path).stat().st_size > bundle_check.MAX_BUNDLE
        data = b"" if too_large else Path(path).read_bytes()
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror or err}") from None
    if too_large:
        report = BundleReport(ca_given=fleet_ca is not None, problems=[Problem("too_large")])
    else:
        report = check_bundle(data, fleet_ca, keyring)
    for line in render(path, report, lang):
        print(line)
    return 0 if report.intact else NOT_INTACT
