"""Adapter over SentencePiece `.model` files (Mistral v1/v3, Llama-2 style vocabularies).

Continuations use a second processor built from the same model proto with the dummy-prefix
space, whitespace squeezing and Unicode normalization switched off, so text keeps its exact
bytes; control symbols ("<s>") are never matched in text by SentencePiece itself.
"""
from __future__ import annotations

from pathlib import Path

import sentencepiece
from sentencepiece import sentencepiece_model_pb2

from anypair.errors import TokenizerError
from anypair.tokenization.base import TableTokenizerAdapter
from anypair.tokenization.pieces import byte_fallback_value, sentencepiece_piece_bytes

_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6
_END_OF_TURN_PIECES = ("[/INST]",)


class SentencePieceAdapter(TableTokenizerAdapter):
    """TokenizerAdapter over a SentencePiece model proto."""

    def __init__(self, model_proto: bytes, *, name: str) -> None:
        proto = sentencepiece_model_pb2.ModelProto()
        try:
            proto.ParseFromString(model_proto)
        except Exception as exc:  # protobuf's DecodeError
            raise TokenizerError(f"{name} is not a SentencePiece model file ({exc})") from exc
        if not proto.pieces:
            raise TokenizerError(f"{name} is not a SentencePiece model file (it has no pieces)")
        table, special_ids, byte_fallback_ids = _piece_table(proto)
        self._prompt_processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        self._continuation_processor = sentencepiece.SentencePieceProcessor(
            model_proto=_verbatim_proto(proto).SerializeToString()
        )
        processor = self._prompt_processor
        super().__init__(
            name=name,
            token_bytes_table=table,
            special_ids=special_ids,
            byte_fallback_ids=byte_fallback_ids,
            bos_id=_valid_id(processor.bos_id()),
            eos_ids={i for i in [processor.eos_id()] if i >= 0},
            unk_id=_valid_id(processor.unk_id()),
            pad_id=_valid_id(processor.pad_id()),
        )

    @classmethod
    def from_file(cls, path: str | Path, name: str | None = None) -> "SentencePieceAdapter":
        path = Path(path)
        try:
            model_proto = path.read_bytes()
        except OSError as exc:
            raise TokenizerError(f"cannot read SentencePiece model {path}: {exc}") from exc
        return cls(model_proto, name=name or path.name)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self._require_unicode(text)
        ids = self._prompt_processor.encode(text)
        return [self.bos_id, *ids] if add_special_tokens and self.bos_id is not None else ids

    def encode_continuation(self, text: str) -> list[int]:
        self._require_unicode(text)
        return self._check_round_trip(text, self._continuation_processor.encode(text))


def _valid_id(token_id: int) -> int | None:
    return token_id if token_id >= 0 else None


def _piece_table(proto) -> tuple[list[bytes], set[int], set[int]]:
    table: list[bytes] = []
    special_ids: set[int] = set()
    byte_fallback_ids: set[int] = set()
    for token_id, piece in enumerate(proto.pieces):
        if piece.type in (_UNKNOWN, _CONTROL, _UNUSED):
            table.append(b"")
            special_ids.add(token_id)
        elif piece.type == _BYTE:
            value = byte_fallback_value(piece.piece)
            if value is None:
                raise TokenizerError(f"byte piece {piece.piece!r} (id {token_id}) is not of the form <0xNN>")
            table.append(bytes([value]))
            byte_fallback_ids.add(token_id)
        else:
            table.append(sentencepiece_piece_bytes(piece.piece, byte_fallback=False))
    return table, special_ids, byte_fallback_ids


def _verbatim_proto(proto):
    """Copy of `proto` that tokenizes text exactly as given."""
    verbatim = sentencepiece_model_pb2.ModelProto()
    verbatim.CopyFrom(proto)
    spec = verbatim.normalizer_spec
    spec.add_dummy_prefix = False
    spec.remove_extra_whitespaces = False
    spec.name = "identity"
    spec.precompiled_charsmap = b""
    return verbatim
