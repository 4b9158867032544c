"""What CUDA-graph training steps rely on, checked on the CPU: buckets, padding rows, the loss of the real rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification

import swagppm
from swagppm.mechanism import weighted_nll
from swagppm.models.build import resolve_model_name
from swagppm.train.engine import Net, Split, graphed_steps
from swagppm.train.graphs import bucket_width, masked_loss, padded_rows, widths


def test_widths_are_rounded_up_to_buckets_and_capped_at_the_split() -> None:
    assert [bucket_width(w, 128) for w in (1, 16, 17, 64, 120, 128)] == [16, 16, 32, 64, 128, 128]
    assert bucket_width(100, 90) == 90
    assert widths(np.array([5, 40, 70]), 70) == [16, 32, 48, 64, 70]
    assert widths(np.array([20, 30]), 128) == [32]


def test_padding_rows_repeat_the_first_record_and_are_marked() -> None:
    padded, valid = padded_rows(torch.tensor([3, 1, 4]), 8)
    assert padded.tolist() == [3, 1, 4, 3, 3, 3, 3, 3]
    assert valid.tolist() == [True] * 3 + [False] * 5
    full, all_valid = padded_rows(torch.arange(8), 8)
    assert full.tolist() == list(range(8)) and bool(all_valid.all())


def test_the_padded_loss_and_gradient_are_those_of_the_real_rows() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, generator=generator, requires_grad=True)
    labels, weights = torch.tensor([0, 4, 2]), torch.tensor([0.5, 1.0, 0.0])
    expected = weighted_nll(logits, labels, weights)
    (grad_expected,) = torch.autograd.grad(expected, logits)

    rows, valid = padded_rows(torch.arange(3), 8)
    padded_logits = logits[rows]
    loss = masked_loss(padded_logits, labels[rows], weights[rows] * valid, torch.tensor(3.0))
    (grad,) = torch.autograd.grad(loss, logits)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, grad_expected)


def test_bucket_padding_leaves_the_real_rows_logits_unchanged(local_pretrained: Path) -> None:
    model = AutoModelForSequenceClassification.from_pretrained(resolve_model_name(str(local_pretrained)),
                                                               num_labels=3).eval()
    lengths = np.array([5, 9, 12])
    ids = torch.randint(5, 100, (3, 12), generator=torch.Generator().manual_seed(1))
    split = Split(ids, np.array([0, 1, 2]), lengths, torch.device("cpu"))
    inputs, _, _ = split.batch(np.arange(3))
    wide = {"input_ids": torch.nn.functional.pad(inputs["input_ids"], (0, 4)),
            "attention_mask": torch.nn.functional.pad(inputs["attention_mask"], (0, 4))}
    with torch.no_grad():
        torch.testing.assert_close(model(**wide).logits, model(**inputs).logits, rtol=1e-5, atol=1e-5)


def test_a_cpu_net_trains_eagerly(config: swagppm.SWAGPPMConfig) -> None:
    with swagppm.Session(config) as session:
        net = Net(session.bundle.model, None, device=session.device, amp=False, graphs=True)
        optimizer = torch.optim.SGD(session.bundle.model.parameters(), lr=0.1)
        assert graphed_steps(net, session.train, optimizer, batch_size=8) is None
        assert session.net.graphs is False  # the session enables graphs on CUDA only
