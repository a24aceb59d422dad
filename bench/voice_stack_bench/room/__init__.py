"""Speech in a simulated room: image-source impulse responses, noise at a stated SNR, several
voices (issue 34's room corpus)."""
