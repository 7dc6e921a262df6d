"""Toy tasks, vocabulary, collate and the bucketed sampler."""

import pytest
import torch

from seq2seq_attn.data import BOS_ID, EOS_ID, PAD_ID, ToyDataModule, Vocab, collate
from seq2seq_attn.data.sampler import BucketBatchSampler
from seq2seq_attn.data.toy import TASKS, make_examples, toy_vocab
from seq2seq_attn.errors import ConfigError


@pytest.mark.parametrize("task", sorted(TASKS))
def test_toy_targets_follow_their_alignment(task):
    vocab = toy_vocab(12)
    for ex in make_examples(task, vocab, 3, 9, 50, seed=1):
        assert len(ex.trg) == len(ex.src) == len(ex.alignment)
        assert [ex.src[j] for j in ex.alignment] == ex.trg
        assert sorted(ex.alignment) == list(range(len(ex.src)))
        assert all(4 <= t < len(vocab) for t in ex.src)
    if task == "sort":
        assert all(ex.trg == sorted(ex.src) for ex in make_examples(task, vocab, 3, 9, 20, seed=2))


def test_generation_is_deterministic_per_seed():
    vocab = toy_vocab(10)
    a = make_examples("reverse", vocab, 2, 8, 30, seed=5)
    assert a == make_examples("reverse", vocab, 2, 8, 30, seed=5)
    assert a != make_examples("reverse", vocab, 2, 8, 30, seed=6)


def test_toy_lengths_and_splits():
    dm = ToyDataModule("copy", train_lengths=(2, 4), test_lengths=(8, 9), train_size=40, val_size=5, test_size=7)
    dm.setup("fit")
    assert {len(ex.src) for ex in dm.datasets["train"].examples} <= {2, 3, 4}
    assert {len(ex.src) for ex in dm.datasets["test"].examples} <= {8, 9}
    assert len(dm.datasets["val"]) == 5 and dm.src_vocab_size == 24


def test_collate_shapes_and_special_ids():
    batch = collate([(0, [5, 6, 7], [7, 6, 5], [2, 1, 0]), (1, [8], [8], [0])])
    assert batch.src.tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID]]
    assert batch.src_lengths.tolist() == [3, 1]
    assert batch.src_mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.trg_in.tolist() == [[BOS_ID, 7, 6, 5], [BOS_ID, 8, PAD_ID, PAD_ID]]
    assert batch.trg_out.tolist() == [[7, 6, 5, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.alignment.tolist() == [[2, 1, 0, -1], [0, -1, -1, -1]]
    assert batch.src.dtype == torch.long


def test_collate_rejects_empty_source():
    with pytest.raises(ConfigError, match="empty"):
        collate([(0, [], [5], None)])


def test_vocab_round_trip_and_unknowns(tmp_path):
    vocab = Vocab.build([["b", "a", "b"], ["c"]])
    assert vocab.itos[:4] == ["<pad>", "<s>", "</s>", "<unk>"] and vocab.itos[4] == "b"
    assert vocab.encode(["a", "zzz"]) == [vocab.stoi["a"], 3]
    assert vocab.decode([vocab.stoi["a"], EOS_ID, vocab.stoi["b"]]) == ["a"]
    vocab.save(tmp_path / "v.json")
    assert Vocab.load(tmp_path / "v.json") == vocab


def test_bucket_sampler_groups_lengths_and_covers_everything():
    lengths = [(i * 7) % 30 + 1 for i in range(300)]
    sampler = BucketBatchSampler(lengths, batch_size=16, shuffle=True, seed=3, pool_batches=4)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(300))
    spread = max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
    assert spread < 15  # sorted inside each pool of 64 sentences
    sampler.set_epoch(1)
    assert list(sampler) != batches  # a new epoch, a new order
    sampler.set_epoch(0)
    assert list(sampler) == batches  # reproducible per epoch


def test_bucket_sampler_token_budget():
    sampler = BucketBatchSampler([10] * 50 + [40] * 10, batch_size=100, max_tokens=200, shuffle=False)
    for batch in sampler:
        assert len(batch) * max(([10] * 50 + [40] * 10)[i] for i in batch) <= 200
