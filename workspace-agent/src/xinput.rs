//! Input into the desktop's display through the XTest extension (as if from a real mouse and
//! keyboard): what the participant in control does in their browser's view of the desktop.

use anyhow::{Context, Result, bail};
use tandem_protocol::live::DesktopInput;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{ConnectionExt as _, Keycode, Keysym};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

const KEY_PRESS: u8 = 2;
const KEY_RELEASE: u8 = 3;
const BUTTON_PRESS: u8 = 4;
const BUTTON_RELEASE: u8 = 5;
const MOTION_NOTIFY: u8 = 6;
const SHIFT_L: Keysym = 0xffe1;
const CONTROL_L: Keysym = 0xffe3;
const ALT_L: Keysym = 0xffe9;
const SUPER_L: Keysym = 0xffeb;
/// Most characters typed by one event.
pub const MAX_TEXT: usize = 4096;

/// The keysym of a DOM `key` name: one printable character, or a named key.
fn keysym(key: &str) -> Option<Keysym> {
    let mut chars = key.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        return match c {
            ' '..='~' => Some(c as Keysym),
            '\n' => Some(0xff0d),
            '\t' => Some(0xff09),
            c if (c as u32) < 0x100 => Some(c as Keysym),
            c => Some(0x0100_0000 | c as Keysym),
        };
    }
    Some(match key {
        "Enter" => 0xff0d,
        "Backspace" => 0xff08,
        "Tab" => 0xff09,
        "Escape" => 0xff1b,
        "Delete" => 0xffff,
        "Home" => 0xff50,
        "End" => 0xff57,
        "PageUp" => 0xff55,
        "PageDown" => 0xff56,
        "ArrowLeft" => 0xff51,
        "ArrowUp" => 0xff52,
        "ArrowRight" => 0xff53,
        "ArrowDown" => 0xff54,
        _ => return None,
    })
}

struct Display {
    conn: RustConnection,
    root: u32,
    width: u16,
    height: u16,
    min_keycode: Keycode,
    per: u8,
    syms: Vec<Keysym>,
}

impl Display {
    fn open(display: &str) -> Result<Self> {
        let (conn, screen) =
            x11rb::connect(Some(display)).context("cannot reach the desktop's display")?;
        let s = &conn.setup().roots[screen];
        let (root, width, height) = (s.root, s.width_in_pixels, s.height_in_pixels);
        let (min, max) = (conn.setup().min_keycode, conn.setup().max_keycode);
        let map = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        Ok(Self {
            conn,
            root,
            width,
            height,
            min_keycode: min,
            per: map.keysyms_per_keycode,
            syms: map.keysyms,
        })
    }

    /// The keycode for `sym`, and whether it needs Shift.
    fn keycode(&self, sym: Keysym) -> Option<(Keycode, bool)> {
        let per = usize::from(self.per.max(1));
        self.syms.chunks(per).enumerate().find_map(|(i, syms)| {
            let at = syms.iter().position(|s| *s == sym)?;
            Some((self.min_keycode + i as u8, at == 1))
        })
    }

    fn at(&self, x: f64, y: f64) -> (i16, i16) {
        let px = (x.clamp(0.0, 1.0) * f64::from(self.width.saturating_sub(1))).round() as i16;
        let py = (y.clamp(0.0, 1.0) * f64::from(self.height.saturating_sub(1))).round() as i16;
        (px, py)
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<()> {
        self.conn
            .xtest_fake_input(kind, detail, x11rb::CURRENT_TIME, self.root, x, y, 0)?;
        Ok(())
    }

    fn press_key(&self, sym: Keysym) -> Result<()> {
        let Some((code, shift)) = self.keycode(sym) else {
            bail!("no key on the display's keyboard for {sym:#x}")
        };
        let shift_code = if shift {
            self.keycode(SHIFT_L).map(|k| k.0)
        } else {
            None
        };
        if let Some(s) = shift_code {
            self.fake(KEY_PRESS, s, 0, 0)?;
        }
        self.fake(KEY_PRESS, code, 0, 0)?;
        self.fake(KEY_RELEASE, code, 0, 0)?;
        if let Some(s) = shift_code {
            self.fake(KEY_RELEASE, s, 0, 0)?;
        }
        Ok(())
    }
}

/// Injects `events` into `display`, in order.
pub fn inject(display: &str, events: &[DesktopInput]) -> Result<()> {
    let d = Display::open(display)?;
    for e in events {
        match e {
            DesktopInput::Move { x, y } => {
                let (x, y) = d.at(*x, *y);
                d.fake(MOTION_NOTIFY, 0, x, y)?;
            }
            DesktopInput::Down { x, y, button } | DesktopInput::Up { x, y, button } => {
                if !(1..=3).contains(button) {
                    bail!("button is 1, 2 or 3");
                }
                let (x, y) = d.at(*x, *y);
                d.fake(MOTION_NOTIFY, 0, x, y)?;
                let kind = if matches!(e, DesktopInput::Down { .. }) {
                    BUTTON_PRESS
                } else {
                    BUTTON_RELEASE
                };
                d.fake(kind, *button, 0, 0)?;
            }
            DesktopInput::Scroll { x, y, dy } => {
                let (x, y) = d.at(*x, *y);
                d.fake(MOTION_NOTIFY, 0, x, y)?;
                // Buttons 4 and 5 are the wheel, one click per line.
                let button = if *dy < 0 { 4 } else { 5 };
                for _ in 0..dy.unsigned_abs().min(50) {
                    d.fake(BUTTON_PRESS, button, 0, 0)?;
                    d.fake(BUTTON_RELEASE, button, 0, 0)?;
                }
            }
            DesktopInput::Key {
                key,
                ctrl,
                alt,
                shift,
                meta,
            } => {
                let sym = keysym(key).with_context(|| format!("unknown key {key:?}"))?;
                // Shift for a character is already in the character (`A`); for the others
                // (Shift+Tab, Shift+ArrowLeft) it is held like the rest.
                let named = key.chars().count() > 1;
                let held: Vec<u8> = [
                    (*ctrl, CONTROL_L),
                    (*alt, ALT_L),
                    (*meta, SUPER_L),
                    (*shift && named, SHIFT_L),
                ]
                .into_iter()
                .filter(|(on, _)| *on)
                .filter_map(|(_, sym)| d.keycode(sym).map(|k| k.0))
                .collect();
                for code in &held {
                    d.fake(KEY_PRESS, *code, 0, 0)?;
                }
                let pressed = d.press_key(sym);
                for code in held.iter().rev() {
                    d.fake(KEY_RELEASE, *code, 0, 0)?;
                }
                pressed?
            }
            DesktopInput::Text { text } => {
                if text.chars().count() > MAX_TEXT {
                    bail!("at most {MAX_TEXT} characters at once");
                }
                for c in text.chars() {
                    if let Some(sym) = keysym(&c.to_string()) {
                        d.press_key(sym)?;
                    }
                }
            }
        }
    }
    d.conn.sync()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dom_keys_map_to_keysyms() {
        assert_eq!(keysym("a"), Some(0x61));
        assert_eq!(keysym("A"), Some(0x41));
        assert_eq!(keysym("Enter"), Some(0xff0d));
        assert_eq!(keysym("ArrowLeft"), Some(0xff51));
        assert_eq!(keysym("é"), Some(0xe9));
        assert_eq!(keysym("F13x"), None);
    }
}
