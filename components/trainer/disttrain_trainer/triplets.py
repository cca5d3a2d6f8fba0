"""FaceNet-style training: batches of people x views, triplet loss with
semi-hard negatives mined inside each batch.

A batch holds P people with K views each (K photos of the person, each
randomly augmented; with one photo per person, as in the self-supervised
sample, the K views are K augmentations of it). Every (anchor, positive) pair
of the same person is matched with a semi-hard negative: the closest other
person that is still farther than the positive (FaceNet, Schroff et al. 2015);
when no negative is farther, the farthest one is used, so early batches still
give a gradient without collapsing onto the hardest outliers.
"""

import numpy as np
import tensorflow as tf

from disttrain_contract.faces import FACE_PREPROCESSING, augment, preprocess


def pairwise_distances(embeddings):
    squared = tf.reduce_sum(tf.square(embeddings), axis=1)
    d2 = squared[:, None] - 2.0 * tf.matmul(embeddings, embeddings, transpose_b=True) + squared[None, :]
    return tf.sqrt(tf.maximum(d2, 1e-12))  # the floor keeps the gradient of sqrt finite at 0


def semi_hard_triplet_loss(labels, embeddings, margin):
    """(per-anchor loss [B], per-anchor "positive is the nearest" [B] as float)."""
    labels = tf.reshape(labels, [-1])
    d = pairwise_distances(embeddings)
    same = tf.equal(labels[:, None], labels[None, :])
    positive = tf.logical_and(same, tf.logical_not(tf.eye(tf.shape(labels)[0], dtype=tf.bool)))  # [a, p]
    negative = tf.logical_not(same)  # [a, n]

    # for each (a, p): negatives with d(a, n) > d(a, p) -> the smallest of them
    farther = tf.logical_and(negative[:, None, :], d[:, None, :] > d[:, :, None])  # [a, p, n]
    semi_hard = tf.reduce_min(tf.where(farther, d[:, None, :], np.inf), axis=2)
    hardest_fallback = tf.reduce_max(tf.where(negative, d, -np.inf), axis=1)[:, None]
    chosen = tf.where(tf.reduce_any(farther, axis=2), semi_hard, hardest_fallback)

    pair_loss = tf.where(positive, tf.nn.relu(d - chosen + margin), 0.0)
    pairs = tf.reduce_sum(tf.cast(positive, tf.float32), axis=1)
    per_anchor = tf.reduce_sum(pair_loss, axis=1) / tf.maximum(pairs, 1.0)

    nearest_positive = tf.reduce_min(tf.where(positive, d, np.inf), axis=1)
    nearest_negative = tf.reduce_min(tf.where(negative, d, np.inf), axis=1)
    return per_anchor, tf.cast(nearest_positive < nearest_negative, tf.float32)


def view_batches(x, y, batch, views, seed):
    """Endless (images, labels) batches of batch // views people x views augmented views,
    each preprocessed (faces.preprocess) exactly as the server prepares a crop for this model."""
    rng = np.random.default_rng(seed)
    photos_of = {}
    for i, person in enumerate(y):
        photos_of.setdefault(int(person), []).append(i)
    people = np.array(sorted(photos_of))
    per_batch = max(2, min(len(people), batch // views))
    while True:
        chosen = rng.choice(people, size=per_batch, replace=False)
        images, labels = [], []
        for person in chosen:
            for photo in rng.choice(photos_of[person], size=views, replace=True):
                images.append(preprocess(augment(x[photo], rng), FACE_PREPROCESSING))
                labels.append(person)
        yield np.stack(images), np.asarray(labels, dtype=np.int64)
